"""OpenAI's Responses wire (``POST {base_url}/responses``): the body, the answer, the stream.

``OpenAIAdapter.respond`` and ``stream_respond`` hand their calls here with the URL and the
headers, so the adapter stays one file of chat wire. Function tools travel flat
(``{"type": "function", "name", "parameters", "description"}``); built-in tools as
``{"type": "web_search"}`` and so on, completed by an option of the tool's name
(``options={"file_search": {"vector_store_ids": [...]}}``; ``code_interpreter`` gets an
automatic container unless told); a ``response_schema`` as ``text.format``. A call that keeps
nothing (``store`` false) and may reason (a ``reasoning`` option, or reasoning items sent
back) asks for ``reasoning.encrypted_content``, so that its reasoning can be sent back;
a model that does not reason refuses that ``include``, so other calls do not ask.
``max_tool_calls`` is sent as it is; no option (nor ``extra_body``) may set what the call sets itself
(``responses_api.RESERVED_OPTIONS``). The built-in tools' billed units are read from the answer's
output items (a ``web_search_call`` or ``file_search_call`` each, a code interpreter's containers),
and more than the call's worst case (``max_tool_calls``) is malformed.
Options are sent in the wire's own names: chat's output bound (``max_tokens``, which a
configuration's options carry) as ``max_output_tokens``, ``reasoning_effort`` as
``reasoning.effort``, ``response_format`` as ``text.format``; chat options the wire does not
take (``seed``, ``stop``, the penalties, ``logprobs``, ``top_k``, ``thinking``) are left out. Such a call
sends its items without their ids (the API refuses ids it never stored), but a reasoning item's.

The stream's text comes from ``response.output_text.delta`` events; each function call is
taken whole from its ``response.output_item.done`` event (the argument deltas before it are
previews of the same text) and handed out with the last chunk, which ``response.completed``
(or ``response.incomplete``) makes with the usage. ``error`` and ``response.failed`` events
are in-band errors; a stream that ends without a last event is malformed.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs

from provmw._base import serde
from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError, InvalidDataError, MalformedResponseError
from provmw.http import (
    ErrorCodes,
    HttpClient,
    InBandError,
    decode_json,
    malformed,
    openai_rate_limit,
    plain_json,
    wire_errors,
)
from provmw.messages import TextPart, ToolSpec
from provmw.operations.responses_api import (
    UNPRICEABLE,
    FunctionCall,
    MessageItem,
    OutputItem,
    ReasoningItem,
    ResponsesRequest,
    ResponsesResponse,
    code_interpreter_unit,
    finish_reason,
    max_tool_calls,
    output_bound,
    output_fields,
    reserved_options,
)
from provmw.providers._opening import OpeningHint
from provmw.providers._usage import UsageBody
from provmw.requests import merged_options
from provmw.responses import ChatChunk, Usage
from provmw.wire import with_extra_body

__all__ = ["RESPONSES_ERROR_CODES", "respond", "responses_body", "stream_respond"]

_SCHEMA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SHAPE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError, ConfigurationError)
_LAST_EVENTS = frozenset({"response.completed", "response.incomplete"})
_BUILTIN_DEFAULTS: Mapping[str, Mapping[str, Any]] = {"code_interpreter": {"container": {"type": "auto"}}}
# Chat's names for what the Responses wire names otherwise (renamed by _wire_options), and chat options it
# does not take at all (left out: the API refuses unknown parameters).
_RENAMED = frozenset({"max_tokens", "max_completion_tokens", "reasoning_effort", "response_format"})
_NOT_TAKEN = frozenset({"seed", "stop", "presence_penalty", "frequency_penalty", "logprobs", "top_k", "thinking"})

log = logging.getLogger(__name__)


def _extract_error(body: Any) -> tuple[str | None, str | None]:
    """An error body (``{"error": {...}}``), or a stream's ``error`` event, whose fields are its own."""
    error = body.get("error", body)
    if isinstance(error, str):
        return None, error
    return error.get("code") or error.get("type"), error.get("message")


RESPONSES_ERROR_CODES = ErrorCodes(extract=_extract_error, not_found_hint="; does base_url end in /v1?")


def _function_tool(tool: ToolSpec) -> dict[str, Any]:
    return {"type": "function", "name": tool.name, "description": tool.description,
            "parameters": plain_json(tool.parameters)}


def _text_format(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Structured outputs, strict; the schema's title names it when it is a valid name."""
    title = schema.get("title")
    name = title if isinstance(title, str) and _SCHEMA_NAME.fullmatch(title) else "response"
    return {"type": "json_schema", "name": name, "schema": plain_json(schema), "strict": True}


def _tool_options(value: object, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"options.{name} must be the fields of the {name} tool (a mapping), "
                                 f"got {type(value).__name__}")
    return value


def _input(request: ResponsesRequest) -> list[dict[str, Any]]:
    """The input items as sent: when nothing is stored server-side (no ``store``, no previous response),
    the API refuses an item id it never kept, so ids go, but a reasoning item's (its encrypted content
    carries it), and reasoning without encrypted content, which nothing could resolve, is left out."""
    if request.store or request.previous_response_id is not None:
        return [i.to_dict() for i in request.input]
    sent = []
    for item in request.input:
        if isinstance(item, ReasoningItem):
            if item.encrypted_content is not None:
                sent.append(item.to_dict())
            continue
        sent.append({k: v for k, v in item.to_dict().items() if k != "id"})
    return sent


def _wire_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` in the Responses wire's names: the output bound as ``max_output_tokens``,
    ``reasoning_effort`` as ``reasoning.effort``, ``response_format`` as ``text.format``."""
    if dropped := sorted(_NOT_TAKEN.intersection(options)):
        log.debug("the Responses wire takes no %s: left out", ", ".join(dropped))
    out = {k: v for k, v in options.items() if k not in _RENAMED | _NOT_TAKEN}
    if (bound := output_bound(options)) is not None:
        out["max_output_tokens"] = bound
    if "reasoning_effort" in options:
        out["reasoning"] = {"effort": options["reasoning_effort"], **out.get("reasoning", {})}
    if (form := options.get("response_format")) is not None:
        out["text"] = {"format": _format_of(form), **out.get("text", {})}
    return out


def _format_of(form: object) -> Any:
    """Chat's ``response_format`` as ``text.format``: its json_schema unwrapped, a bare name as its type."""
    if isinstance(form, str):
        return {"type": form}
    if isinstance(form, Mapping) and isinstance(form.get("json_schema"), Mapping):
        return {"type": "json_schema", **form["json_schema"]}
    return form


def responses_body(config: ProviderConfig, request: ResponsesRequest) -> dict[str, Any]:
    """The JSON body of a Responses call, as the OpenAI API documents it."""
    merged = merged_options(config, request.options)
    reserved_options(merged)  # the call's own are checked when it is made; a configuration's are here
    max_tool_calls(merged)
    options = _wire_options(merged)
    tools = [_function_tool(t) for t in request.tools]
    tools += [{"type": name, **_BUILTIN_DEFAULTS.get(name, {}), **_tool_options(options.pop(name, {}), name)}
              for name in request.builtin_tools]
    body: dict[str, Any] = {"model": config.model, "input": _input(request), "store": request.store}
    for key, value in (("instructions", request.instructions), ("previous_response_id", request.previous_response_id),
                       ("tools", tools or None)):
        if value is not None:
            body[key] = value
    if not tools:
        options.pop("tool_choice", None)
    if request.response_schema is not None:
        options["text"] = {**options.get("text", {}), "format": _text_format(request.response_schema)}
    reasons = "reasoning" in options or any(isinstance(i, ReasoningItem) for i in request.input)
    if not request.store and reasons:
        body["include"] = ["reasoning.encrypted_content"]
    extra = {"extra_body": options.pop("extra_body", {})}
    # What the call writes itself is what it was priced and checked on: no option may replace it, and
    # extra_body may replace neither it nor an option (max_output_tokens: the bound it was priced at).
    if taken := sorted(set(body) & set(options)):
        raise ConfigurationError(f"options must not set {', '.join(taken)}: the call's own fields")
    body.update({name: plain_json(value) for name, value in options.items()})
    return with_extra_body(body, extra)


async def respond(http: HttpClient, config: ProviderConfig, request: ResponsesRequest, *, provider: str,
                  url: str, headers: Mapping[str, str]) -> ResponsesResponse:
    """One unary Responses call; a ``failed`` answer raises as its error event would."""
    with wire_errors(RESPONSES_ERROR_CODES, provider=provider, model=config.model):
        data, answered = await http.post_json_with_headers(url, responses_body(config, request), headers)
        if isinstance(data, Mapping) and data.get("status") == "failed":
            raise _failed(data)
    try:
        answer = _answer(serde.mapping(data, "response"), request, provider, config)
        answer = attrs.evolve(answer, rate_limit=openai_rate_limit(answered))
    except _SHAPE_ERRORS as exc:
        raise malformed(provider, config.model, exc) from None
    return answer


def _answer(body: Mapping[str, Any], request: ResponsesRequest, provider: str,
            config: ProviderConfig) -> ResponsesResponse:
    output = _output(body, "response")
    status = serde.get(body, "status", str, "response", default=None)
    finish = finish_reason(status, _incomplete_reason(body), any(isinstance(i, FunctionCall) for i in output))
    return ResponsesResponse(
        provider=provider, model=serde.get(body, "model", str, "response", default=None) or config.model,
        response_id=serde.get(body, "id", str, "response", default=None),
        usage=_usage(body, request, provider, config),
        served_by=config.identifier, status=status, finish_reason=finish, **output_fields(output))


async def stream_respond(http: HttpClient, config: ProviderConfig, request: ResponsesRequest, *, provider: str,
                         url: str, headers: Mapping[str, str]) -> AsyncIterator[ChatChunk]:
    """The chunks of a streamed Responses call, as ``stream_chat``'s: text, then one last chunk with the
    function calls, the finish reason and the usage."""
    body = {**responses_body(config, request), "stream": True}
    opening = OpeningHint(openai_rate_limit)
    events = http.post_sse_with_headers(url, body, headers, on_headers=opening.headers)
    calls: dict[int, FunctionCall] = {}
    with wire_errors(RESPONSES_ERROR_CODES, provider=provider, model=config.model):
        async for event in events:
            data = _event(event.data, provider, config)
            kind = data.get("type") or event.event
            if (failure := _failure(kind, data, event.data)) is not None:
                raise failure
            try:
                chunk = _chunk(kind, data, calls, request, provider, config)
            except _SHAPE_ERRORS as exc:
                raise malformed(provider, config.model, exc) from None
            if chunk is not None:
                yield opening.first(chunk)
                if chunk.finish_reason is not None:
                    return
    raise MalformedResponseError("stream ended before response.completed", provider=provider, model=config.model)


def _failure(kind: str | None, data: Mapping[str, Any], raw: str) -> InBandError | None:
    """The in-band error an event is: an ``error`` event (or one that only carries an error), a failed response."""
    if kind == "error" or (kind is None and data.get("error") is not None):
        return InBandError(raw)
    return _failed(data.get("response")) if kind == "response.failed" else None


def _failed(response: object) -> InBandError:
    error = response.get("error") if isinstance(response, Mapping) else None
    return InBandError(json.dumps({"error": error or {"message": "the response failed"}}))


def _chunk(kind: str | None, data: Mapping[str, Any], calls: dict[int, FunctionCall], request: ResponsesRequest,
           provider: str, config: ProviderConfig) -> ChatChunk | None:
    """The chunk an event makes, if any: text, or the last one; a whole function call is kept for the last."""
    if kind == "response.output_text.delta":
        delta = serde.get(data, "delta", str, "event")
        return ChatChunk(text=delta) if delta else None
    if kind == "response.output_item.done":
        _take_call(data, calls)
    elif kind in _LAST_EVENTS:
        return _last(data, calls, request, provider, config)
    return None


def _event(text: str, provider: str, config: ProviderConfig) -> Mapping[str, Any]:
    try:
        return serde.mapping(decode_json(text), "event")
    except _SHAPE_ERRORS as exc:
        raise malformed(provider, config.model, exc) from None


def _take_call(data: Mapping[str, Any], calls: dict[int, FunctionCall]) -> None:
    item = _output_item(data.get("item"), "event.item")
    if isinstance(item, FunctionCall):
        calls[serde.get(data, "output_index", int, "event", default=len(calls))] = item


def _last(data: Mapping[str, Any], calls: dict[int, FunctionCall], request: ResponsesRequest, provider: str,
          config: ProviderConfig) -> ChatChunk:
    response = serde.get(data, "response", dict, "event")
    # The calls the stream handed whole; a server that sent none of them still lists them in its last event.
    taken = tuple(calls[i] for i in sorted(calls)) or tuple(
        i for i in _output(response, "event.response") if isinstance(i, FunctionCall))
    status = serde.get(response, "status", str, "event.response", default=None)
    return ChatChunk(finish_reason=finish_reason(status, _incomplete_reason(response), bool(taken)),
                     usage=_usage(response, request, provider, config), tool_calls=output_fields(taken)["tool_calls"],
                     response_id=serde.get(response, "id", str, "event.response", default=None))


def _output(body: Mapping[str, Any], where: str) -> tuple[OutputItem, ...]:
    items = serde.get(body, "output", list, where, default=None) or []
    read = (_output_item(v, f"{where}.output[{i}]") for i, v in enumerate(items))
    return tuple(item for item in read if item is not None)


def _output_item(value: object, where: str) -> OutputItem | None:
    """A message, function call or reasoning item; None for the built-in tools' own items (a web search's)."""
    item = serde.mapping(value, where)
    kind = serde.get(item, "type", str, where)
    item_id = serde.get(item, "id", str, where, default=None) or None
    if kind == "message":
        parts = [serde.mapping(p, f"{where}.content[{i}]")
                 for i, p in enumerate(serde.get(item, "content", list, where, default=None) or [])]
        texts = [serde.get(p, "text", str, f"{where}.content") for p in parts if p.get("type") == "output_text"]
        return MessageItem("assistant", tuple(TextPart(t) for t in texts), item_id)
    if kind == "function_call":
        return FunctionCall(serde.get(item, "call_id", str, where), serde.get(item, "name", str, where),
                            serde.get(item, "arguments", str, where, default=None) or "{}", item_id)
    if kind == "reasoning":
        summary = serde.get(item, "summary", list, where, default=None) or []
        texts = [serde.get(serde.mapping(s, f"{where}.summary"), "text", str, f"{where}.summary") for s in summary]
        if item_id is None:
            raise InvalidDataError(f"{where}: a reasoning item without an id")
        return ReasoningItem(item_id, texts, serde.get(item, "encrypted_content", str, where, default=None))
    return None


def _incomplete_reason(body: Mapping[str, Any]) -> str | None:
    details = serde.get(body, "incomplete_details", dict, "response", default=None) or {}
    return serde.get(details, "reason", str, "response.incomplete_details", default=None)


def _usage(body: Mapping[str, Any], request: ResponsesRequest, provider: str, config: ProviderConfig) -> Usage:
    """The Responses wire's counts include their parts, as chat's do: input the cached, output the reasoning;
    and the built-in tools' billed units, read from the output items."""
    usage = UsageBody.of(body.get("usage"), provider=provider, model=config.model)
    counted = usage.usage(input_tokens=usage.count("input_tokens"), output_tokens=usage.count("output_tokens"),
                          cached_input_tokens=usage.count("input_tokens_details", "cached_tokens"),
                          reasoning_tokens=usage.count("output_tokens_details", "reasoning_tokens"))
    units = _tool_units(body, request, provider, config)
    return attrs.evolve(counted, units=units) if units else counted


def _tool_units(body: Mapping[str, Any], request: ResponsesRequest, provider: str,
                config: ProviderConfig) -> dict[str, float]:
    """Each built-in tool's billed units: its call items (a search's), and the containers a code interpreter
    opened (one, used or not, unless its items name more); more than the call's worst case is malformed."""
    options = merged_options(config, request.options)
    items = [i for i in serde.get(body, "output", list, "response", default=None) or [] if isinstance(i, Mapping)]
    counts = {"web_search_call": sum(i.get("type") == "web_search_call" for i in items),
              "file_search_call": sum(i.get("type") == "file_search_call" for i in items)}
    session = code_interpreter_unit(options) if "code_interpreter" in request.builtin_tools else None
    if session is not None:
        containers = {i.get("container_id") for i in items if i.get("type") == "code_interpreter_call"}
        counts[session] = max(1, len(containers))
    units = {unit: float(n) for unit, n in counts.items() if n}
    most = request.most_units(options)
    over = [] if UNPRICEABLE in most else [f"{n:g} {unit}" for unit, n in units.items() if n > most.get(unit, 0.0)]
    if over:
        raise MalformedResponseError(f"the answer reports {', '.join(over)}, above the call's worst case "
                                     "(max_tool_calls, the built-in tools it asked)", provider=provider,
                                     model=config.model)
    return units
