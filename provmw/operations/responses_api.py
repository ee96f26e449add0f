"""OpenAI's Responses API as a provmw operation: input and output items, the request, the answer.

A request's ``input`` is a string (one user message) or a sequence of items: ``MessageItem``
(a role and text or image parts), ``FunctionCall`` (a call the model made, sent back),
``FunctionCallOutput`` (what the tool answered) and ``ReasoningItem`` (a reasoning model's
summary and ``encrypted_content``, sent back to a stateless conversation). Each item's
``to_dict`` is its wire form, and :func:`input_items` reads those dicts, provmw's image part
and a ``ResponsesResponse``'s ``output`` back, so a caller continues a conversation with
``[*answer.output, FunctionCallOutput(call_id, result)]``.

An adapter with the native wire (``Capabilities.responses``) sends the request as it is. A
call that only the native wire can serve needs ``responses``: one that names a
``previous_response_id``, asks the provider to ``store`` the answer, or sends back reasoning
with ``encrypted_content``. Any other call is served by any chat adapter, translated:

``to_chat`` (request to ``ChatRequest``):
- ``instructions`` become the first message, a system message;
- a message item becomes a message of its role (``developer`` is ``system``), parts as they are;
- a function call becomes a tool call of the assistant message before it (a new assistant
  message when the one before is not the assistant's); a function call output becomes a tool
  message answering its ``call_id``;
- reasoning items are dropped: a chat wire takes no reasoning back;
- ``tools`` and ``response_schema`` are carried as they are; options are carried but for
  ``max_output_tokens``, which becomes ``max_tokens``, ``reasoning.effort``, which becomes
  ``reasoning_effort``, and the Responses-only ones (``include``, ``truncation``, ``text``,
  ``background``, ``reasoning``'s other fields), which are dropped;
- what only the native wire does (``previous_response_id``, ``store``, encrypted reasoning,
  built-in tools) raises ``UnsupportedOperationError``: its needs keep it from chat adapters.

``from_completion`` (chat answer to ``ResponsesResponse``): the text becomes one assistant
message item and each tool call a function call item (``call_id`` is the tool call's id), in
that order; ``finish_reason`` is kept; ``status`` is ``incomplete`` when the answer was cut
(``length``, ``content_filter``), else ``completed``; ``response_id`` is the chat answer's own
id; ``parsed`` is the completion's, or the text validated here against ``response_schema`` (left
None when it does not follow it: the ``structured_output`` layer raises, as for chat).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from provmw._base import serde
from provmw.context import FrozenMap
from provmw.errors import ConfigurationError, StructuredOutputError, UnsupportedOperationError
from provmw.messages import ImagePart, Message, ToolCall, ToolSpec, tools_from
from provmw.operations._responses_items import (
    FunctionCall,
    FunctionCallOutput,
    InputItem,
    MessageItem,
    OutputItem,
    ReasoningItem,
    canonical,
    input_items,
    item_from_dict,
    item_text,
    item_texts,
    optional_text,
    with_item_texts,
)
from provmw.requests import ChatRequest
from provmw.responses import CompletionResponse, ProviderResponse
from provmw.structured import parsed_answer, schema_of

__all__ = ["BUILTIN_TOOLS", "FunctionCall", "FunctionCallOutput", "InputItem", "MessageItem", "OutputItem",
           "ReasoningItem", "ResponsesRequest", "ResponsesResponse", "finish_reason", "from_completion",
           "input_items", "item_from_dict", "output_bound", "output_fields", "to_chat", "with_parsed"]

BUILTIN_TOOLS = ("web_search", "file_search", "code_interpreter")
# Options only the Responses wire reads; a translated call leaves them out (see the docstring).
_RESPONSES_ONLY = frozenset({"include", "truncation", "text", "background", "reasoning", "max_output_tokens"})
# What a provider adds around a request's text, in the largest figures of provmw._call.facts.ALLOWANCES,
# counted as bytes of text (a byte is at most a token): per item, per image, per tool, once with tools.
_PER_ITEM, _PER_IMAGE, _PER_TOOL, _WITH_TOOLS, _PER_REQUEST = 8, 48_200, 64, 600, 16


def _builtin(value: object) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, list | tuple) else None
    if names is None or any(n not in BUILTIN_TOOLS for n in names) or len(set(names)) != len(names):
        raise ConfigurationError(f"builtin_tools must name each of {', '.join(BUILTIN_TOOLS)} at most once, "
                                 f"got {value!r}")
    return tuple(sorted(names))  # order changes nothing: the cache key must not see it


def _store(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigurationError(f"store must be True or False, got {type(value).__name__}")


def _options(value: Mapping[str, Any] | None) -> FrozenMap:
    if value is not None and not isinstance(value, Mapping):
        raise ConfigurationError(f"options must be a mapping, got {type(value).__name__}")
    return value if isinstance(value, FrozenMap) else FrozenMap(value)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@attrs.frozen
class ResponsesRequest:
    """One call of the Responses API (see the module docstring); implements ``OperationRequest``."""

    input: tuple[InputItem, ...] = attrs.field(converter=input_items)
    instructions: str | None = attrs.field(default=None, validator=optional_text())
    tools: tuple[ToolSpec, ...] = attrs.field(default=(), converter=tools_from)
    builtin_tools: tuple[str, ...] = attrs.field(default=(), converter=_builtin)
    previous_response_id: str | None = attrs.field(default=None, validator=optional_text(empty=False))
    store: bool = attrs.field(default=False, validator=_store)
    response_schema: FrozenMap | None = attrs.field(default=None, converter=schema_of)
    options: FrozenMap = attrs.field(factory=FrozenMap, converter=_options)

    @property
    def native_only(self) -> bool:
        """Whether only the Responses wire can serve it: it leans on what the provider keeps or encrypted."""
        return self.previous_response_id is not None or self.store or any(
            isinstance(i, ReasoningItem) and i.encrypted_content is not None for i in self.input)

    def _images(self) -> tuple[ImagePart, ...]:
        return tuple(p for i in self.input if isinstance(i, MessageItem) for p in i.images)

    def to_dict(self) -> dict[str, Any]:
        """Canonical plain JSON of all that changes the answer; images by their SHA-256."""
        return {"input": [canonical(i) for i in self.input], "instructions": self.instructions,
                "tools": [t.to_dict() for t in self.tools], "builtin_tools": list(self.builtin_tools),
                "previous_response_id": self.previous_response_id, "store": self.store,
                "response_schema": None if self.response_schema is None else _plain(self.response_schema),
                "options": _plain(self.options)}

    def needs(self, *, streaming: bool) -> frozenset[str]:
        images = self._images()
        wanted = {"streaming": streaming, "tools": bool(self.tools), "schema": self.response_schema is not None,
                  "vision": bool(images), "vision_url": any(p.url is not None for p in images),
                  "vision_bytes": any(p.data is not None for p in images), "responses": self.native_only}
        return frozenset(["chat", *self.builtin_tools, *(need for need, yes in wanted.items() if yes)])

    def input_bytes(self) -> int:
        text = sum(len(item_text(i).encode()) + _PER_ITEM for i in self.input) + len((self.instructions or "").encode())
        tools = sum(len(json.dumps(t.to_dict()).encode()) + _PER_TOOL for t in self.tools)
        schema = 0 if self.response_schema is None else len(json.dumps(_plain(self.response_schema)).encode())
        extra = _WITH_TOOLS if self.tools or self.builtin_tools else 0
        return _PER_REQUEST + text + tools + schema + extra + _PER_IMAGE * len(self._images())

    def estimate_tokens(self) -> int:
        chars = sum(len(item_text(i)) for i in self.input) + len(self.instructions or "")
        return chars // 4 + 340 * len(self._images()) // 4 + 1

    def most_output_tokens(self, options: Mapping[str, Any]) -> int | None:
        return output_bound(options)

    def most_units(self, options: Mapping[str, Any]) -> Mapping[str, float]:
        return {}

    def deterministic(self, options: Mapping[str, Any]) -> bool:
        """Temperature 0 or a seed; never a call that continues or keeps a stored response."""
        if self.previous_response_id is not None or self.store:
            return False
        return options.get("temperature") == 0 or options.get("seed") is not None

    def texts(self) -> tuple[str, ...]:
        """The instructions, then each item's texts in order: text parts, a call's arguments, a tool's
        output, reasoning summaries (images and encrypted reasoning are not text a layer can read)."""
        head = () if self.instructions is None else (self.instructions,)
        return head + tuple(text for item in self.input for text in item_texts(item))

    def with_texts(self, texts: Sequence[str]) -> ResponsesRequest:
        """The same request with ``texts()`` replaced, in their order."""
        if len(texts) != len(self.texts()) or not all(isinstance(t, str) for t in texts):
            raise ConfigurationError(f"texts: this request has {len(self.texts())} texts, got {len(texts)}")
        given = iter(texts)
        instructions = None if self.instructions is None else next(given)
        items = tuple(with_item_texts(item, given) for item in self.input)
        return attrs.evolve(self, instructions=instructions, input=items)


def _output(value: object) -> tuple[OutputItem, ...]:
    items = tuple(value) if isinstance(value, list | tuple) else ()
    if not all(isinstance(i, MessageItem | FunctionCall | ReasoningItem) for i in items):
        raise ConfigurationError("ResponsesResponse.output holds messages, function calls and reasoning only")
    return items


@attrs.frozen(kw_only=True)
class ResponsesResponse(ProviderResponse):
    """A Responses API answer: its ``output`` items, and what they say (``text``, ``tool_calls``).

    ``finish_reason`` is as chat's (stop, length, tool_calls, content_filter); ``status`` is the
    provider's (completed, incomplete); ``parsed`` is the text as JSON validated against the
    call's ``response_schema``, when it gave one.
    """

    TYPE = "responses"

    output: tuple[OutputItem, ...] = attrs.field(default=(), converter=_output)
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    parsed: Any = attrs.field(default=None, hash=False)
    status: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "output": [i.to_dict() for i in self.output]}

    @classmethod
    def _fields_from(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        where = cls.TYPE
        output = serde.get(data, "output", list, where, default=[])
        return {**super()._fields_from(data),
                "output": tuple(item_from_dict(v, f"{where}.output[{i}]") for i, v in enumerate(output)),
                "text": serde.get(data, "text", str, where, default=""),
                "tool_calls": tuple(ToolCall.from_dict(c) for c in serde.get(data, "tool_calls", list, where,
                                                                             default=[])),
                "finish_reason": serde.get(data, "finish_reason", str, where, default=None),
                "parsed": data.get("parsed"), "status": serde.get(data, "status", str, where, default=None)}


def output_fields(output: tuple[OutputItem, ...]) -> dict[str, Any]:
    """The ``output``, ``text`` and ``tool_calls`` fields of an answer made of ``output``."""
    text = "".join(i.text for i in output if isinstance(i, MessageItem) and i.role == "assistant")
    calls = tuple(ToolCall(i.call_id, i.name, i.arguments) for i in output if isinstance(i, FunctionCall))
    return {"output": output, "text": text, "tool_calls": calls}


def finish_reason(status: str | None, incomplete_reason: str | None, calls: bool) -> str:
    """Chat's finish reason for a Responses status: a cut answer is ``length`` or ``content_filter``."""
    if status == "incomplete":
        return "content_filter" if incomplete_reason == "content_filter" else "length"
    return "tool_calls" if calls else "stop"


def output_bound(options: Mapping[str, Any]) -> int | None:
    """The most output tokens ``options`` allow: ``max_output_tokens``, else chat's names for it (the larger),
    which a configuration's options carry; both wires send this bound."""
    def count(name: str) -> int | None:
        value = options.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    if (own := count("max_output_tokens")) is not None:
        return own
    bounds = [b for b in (count("max_tokens"), count("max_completion_tokens")) if b is not None]
    return max(bounds) if bounds else None


def with_parsed(response: ResponsesResponse, request: ResponsesRequest) -> ResponsesResponse:
    """``response`` with ``parsed`` set when ``request`` gave a schema and the text follows it. An answer
    that does not is returned as it is: the ``structured_output`` layer judges it, outside the usage layer,
    so that the ledger records what the answer cost before the call fails."""
    if request.response_schema is None or response.tool_calls:
        return response
    proxy = CompletionResponse(provider=response.provider, model=response.model, text=response.text)
    try:
        return attrs.evolve(response, parsed=parsed_answer(proxy, request.response_schema).parsed)
    except StructuredOutputError:
        return response


def to_chat(request: ResponsesRequest) -> ChatRequest:
    """The chat request that asks what ``request`` asks (the rules: the module docstring)."""
    if request.native_only or request.builtin_tools:
        what = "builtin_tools" if request.builtin_tools else "responses"
        raise UnsupportedOperationError("chat", what)
    messages = [Message.system(request.instructions)] if request.instructions else []
    for item in request.input:
        if isinstance(item, FunctionCall):
            call = ToolCall(item.call_id, item.name, item.arguments)
            if messages and messages[-1].role == "assistant":
                messages[-1] = attrs.evolve(messages[-1], tool_calls=(*messages[-1].tool_calls, call))
            else:
                messages.append(Message.assistant(tool_calls=(call,)))
        elif isinstance(item, FunctionCallOutput):
            messages.append(Message.tool(item.call_id, item.output))
        elif isinstance(item, MessageItem):
            role = "system" if item.role == "developer" else item.role
            messages.append(Message(role, item.content))
    return ChatRequest(tuple(messages), request.tools, _chat_options(request.options), request.response_schema)


def _chat_options(options: FrozenMap) -> dict[str, Any]:
    out = {k: v for k, v in options.items() if k not in _RESPONSES_ONLY}
    if "max_output_tokens" in options:
        out["max_tokens"] = options["max_output_tokens"]
        out.pop("max_completion_tokens", None)
    reasoning = options.get("reasoning")
    if isinstance(reasoning, Mapping) and reasoning.get("effort") is not None:
        out["reasoning_effort"] = reasoning["effort"]
    return out


def from_completion(response: CompletionResponse, request: ResponsesRequest) -> ResponsesResponse:
    """The Responses answer a chat answer to ``to_chat(request)`` stands for (rules: the module docstring)."""
    output: list[OutputItem] = [MessageItem("assistant", response.text)] if response.text else []
    output += [FunctionCall(c.id, c.name, c.arguments) for c in response.tool_calls]
    cut = response.finish_reason in ("length", "content_filter")
    answer = ResponsesResponse(
        provider=response.provider, model=response.model, response_id=response.response_id, usage=response.usage,
        served_by=response.served_by, cached=response.cached, attempts=response.attempts,
        rate_limit=response.rate_limit, finish_reason=response.finish_reason, parsed=response.parsed,
        status="incomplete" if cut else "completed", **output_fields(tuple(output)))
    return answer if response.parsed is not None else with_parsed(answer, request)
