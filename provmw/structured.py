"""Structured output: a call's ``response_schema``, the check of an answer, and its repair turn.

``schema_of`` turns what a caller passes (a JSON Schema dict, or a pydantic model class,
read by duck typing so pydantic is never imported) into the plain schema a request carries;
``parsed_answer`` validates an answer's text against it with ``jsonschema`` (a dependency of
provmw, imported on the first call that needs it, ADR 0024); ``repaired`` is the request of
the one repair turn the ``structured_output`` middleware asks for. ``parsed_stream`` checks
a streamed answer at its end: a stream cannot be repaired, its chunks are already read.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from provmw.context import FrozenMap
from provmw.errors import ConfigurationError, StructuredOutputError
from provmw.http import plain_json
from provmw.messages import Message, ToolCall
from provmw.requests import ChatRequest
from provmw.responses import ChatChunk, CompletionResponse

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = ["parsed_answer", "parsed_stream", "repaired", "schema_of"]

C = TypeVar("C", bound=CompletionResponse)

_PROBLEM_CHARS = 500  # of a validation message, in an error and in the repair turn


def schema_of(value: object) -> FrozenMap | None:
    """The JSON Schema ``value`` stands for: a mapping, or a class with ``model_json_schema``
    (a pydantic model); ``ConfigurationError`` for anything else or an invalid schema."""
    if value is None:
        return None
    if isinstance(value, type) and callable(getattr(value, "model_json_schema", None)):
        value = value.model_json_schema()  # type: ignore[attr-defined]
    if not isinstance(value, Mapping):
        raise ConfigurationError("response_schema must be a JSON Schema object (a dict) or a pydantic model class, "
                                 f"got {type(value).__name__}")
    schema = plain_json(value)
    if schema.get("type") != "object":
        raise ConfigurationError('response_schema must describe a JSON object at its root ("type": "object"): '
                                 "providers constrain only objects")
    _check_schema(schema)
    return FrozenMap(schema)


def parsed_answer(response: C, schema: Mapping[str, Any], *, tries: int = 1) -> C:
    """``response`` with ``parsed`` set to its text as JSON, which follows ``schema``; else
    ``StructuredOutputError`` naming the problem. An answer that calls tools is let through."""
    if response.tool_calls:
        return response
    try:
        value = json.loads(response.text)
    except ValueError as exc:
        problem = f"the answer is not JSON ({exc})"
    else:
        found = next(iter(_validator(schema).iter_errors(value)), None)
        if found is None:
            return attrs.evolve(response, parsed=value)
        where = "/".join(str(part) for part in found.absolute_path) or "(root)"
        problem = f"at {where}: {found.message}"[:_PROBLEM_CHARS]
    raise StructuredOutputError(f"the answer does not follow response_schema after {tries} tries: {problem}",
                                problem=problem, provider=response.provider, model=response.model)


async def parsed_stream(chunks: AsyncIterator[ChatChunk], schema: Mapping[str, Any], *, provider: str,
                        model: str) -> AsyncGenerator[ChatChunk, None]:
    """``chunks`` as they come, the last with ``parsed`` set (see ``parsed_answer``); an answer
    that does not follow ``schema`` raises ``StructuredOutputError`` after its last chunk.

    A chunk with a finish reason or usage, and any after it, is handed out one chunk late:
    only the end of the stream says which is the last. Text comes at once.
    """
    text: list[str] = []
    calls: list[ToolCall] = []
    held: ChatChunk | None = None
    last = ChatChunk()
    async for last in chunks:
        text.append(last.text)
        calls.extend(last.tool_calls)
        if held is not None:
            yield held
        held = None if last.finish_reason is None and last.usage is None else last
        if held is None:
            yield last
    answer = CompletionResponse(provider=provider, model=model, text="".join(text), tool_calls=tuple(calls))
    try:
        parsed = parsed_answer(answer, schema).parsed
    except StructuredOutputError:
        if held is not None:
            yield held
        raise
    end = held or ChatChunk(served_by=last.served_by, attempts=last.attempts)
    yield attrs.evolve(end, parsed=parsed)


def repaired(request: ChatRequest, answer: str, problem: str) -> ChatRequest:
    """``request`` followed by the invalid ``answer`` and a user turn asking for one that follows the schema."""
    ask = (f"That answer does not follow the required JSON Schema: {problem}. "
           "Answer again with only a JSON value that follows the schema.")
    turns = (*request.messages, Message.assistant(answer), Message.user(ask))
    return attrs.evolve(request, messages=turns)


def _check_schema(schema: Mapping[str, Any]) -> None:
    import jsonschema  # here: only calls with a response_schema pay for the import

    try:
        jsonschema.validators.validator_for(schema).check_schema(dict(schema))
    except jsonschema.SchemaError as exc:
        raise ConfigurationError(f"response_schema is not a valid JSON Schema: {exc.message}") from None


def _validator(schema: Mapping[str, Any]) -> Validator:
    import jsonschema

    plain = plain_json(schema)
    return jsonschema.validators.validator_for(plain)(plain)
