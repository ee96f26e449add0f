"""OpenAI's Responses API as a provmw operation: input and output items, the request, the answer.

A request's ``input`` is a string (one user message) or a sequence of items: ``MessageItem``
(a role and text or image parts), ``FunctionCall`` (a call the model made, sent back),
``FunctionCallOutput`` (what the tool answered) and ``ReasoningItem`` (a reasoning model's
summary and ``encrypted_content``, sent back to a stateless conversation). Each item's
``to_dict`` is its wire form, and :func:`input_items` reads those dicts, provmw's image part
and a ``ResponsesResponse``'s ``output`` back, so a caller continues a conversation that the
provider keeps nothing of with ``[*request.input, *answer.output, FunctionCallOutput(call_id, result)]``.

An adapter with the native wire (``Capabilities.responses``) sends the request as it is. A
call that only the native wire can serve needs ``responses``: one that names a
``previous_response_id``, asks the provider to ``store`` the answer, or sends back reasoning
with ``encrypted_content``. Any other call is served by any chat adapter, translated by
``provmw.operations.responses_chat`` (its docstring holds the rules), kept apart so that this
module, which the operations table imports, never imports ``provmw.requests`` (which imports the
table).
A call's worst case is unknown, so that a strict budget refuses it before it is sent
(``unknown_worst_case`` says why), when it continues a stored conversation, which the provider
bills as input again, or asks built-in tools without ``max_tool_calls`` (each tool call is billed:
``TOOL_UNITS``). No option, nor ``extra_body``, may set what the call sets by its own arguments
(``RESERVED_OPTIONS``): a follow-up hidden there would escape the cache's rule and the bound.
Whether an answer follows ``response_schema`` is judged above (the ``structured_output`` layer),
which sets ``parsed``, as for chat.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from provmw._base import serde
from provmw.context import FrozenMap
from provmw.errors import ConfigurationError
from provmw.messages import ImagePart, ToolCall, ToolSpec, tools_from
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
from provmw.responses import ProviderResponse

__all__ = ["BUILTIN_TOOLS", "RESERVED_EXTRA_BODY", "RESERVED_OPTIONS", "TOOL_UNITS", "UNPRICEABLE", "FunctionCall",
           "FunctionCallOutput", "InputItem", "MessageItem", "OutputItem", "ReasoningItem", "ResponsesRequest",
           "ResponsesResponse", "code_interpreter_unit", "finish_reason", "input_items", "item_from_dict",
           "max_tool_calls", "output_bound", "output_fields", "reserved_options"]

BUILTIN_TOOLS = ("web_search", "file_search", "code_interpreter")
# What each built-in tool is billed by (ADR 0052): a web or file search per call, a code interpreter per
# container (session). A call whose tool asks an automatic container (the default) opens one, whether
# the model runs code or not; one naming a container opens none (it was billed when created). A container
# of more memory than the default 1 GB costs more: its unit is named for it (code_interpreter_session:4g).
TOOL_UNITS: Mapping[str, str] = MappingProxyType({
    "web_search": "web_search_call", "file_search": "file_search_call", "code_interpreter": "code_interpreter_session"})
# Fields a call sets by its own arguments, or that would make it something else than it was checked,
# priced and keyed as (a stored conversation continued, a background job, a stream, other tools or
# output): no option may set them, and neither may extra_body, which may not set max_tool_calls either
# (the option its fees' bound is read from).
RESERVED_OPTIONS = frozenset({"previous_response_id", "conversation", "prompt", "store", "instructions", "input",
                              "include", "background", "stream", "text", "tools"})
RESERVED_EXTRA_BODY = RESERVED_OPTIONS | {"max_tool_calls"}
# A unit no price names: a worst case that holds it is unknown (Price.most_units_usd is None), so a
# strict cost limit refuses the call before it is sent (``unknown_worst_case`` says why).
UNPRICEABLE = "unpriceable"
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
    options = value if isinstance(value, FrozenMap) else FrozenMap(value)
    reserved_options(options)
    return options


def reserved_options(options: Mapping[str, Any]) -> None:
    """Refuse ``options`` that set what the call sets itself (:data:`RESERVED_OPTIONS`), directly or
    through ``extra_body``: a follow-up hidden there would escape the cache's rule and the budget's bound."""
    extra = options.get("extra_body") or {}
    taken = sorted(RESERVED_OPTIONS.intersection(options)) + sorted(
        RESERVED_EXTRA_BODY.intersection(extra) if isinstance(extra, Mapping) else ())
    if taken:
        raise ConfigurationError(f"options must not set {', '.join(taken)} (directly or in extra_body): a Responses "
                                 "call sets them by its own arguments (input, instructions, tools, builtin_tools, "
                                 "previous_response_id, store, response_schema)")


def code_interpreter_unit(options: Mapping[str, Any]) -> str | None:
    """The unit the call's code interpreter is billed in (None: it names a container, and opens none)."""
    tool = options.get("code_interpreter") or {}
    container = tool.get("container", {}) if isinstance(tool, Mapping) else {}
    if not isinstance(container, Mapping):
        return None  # a container's id
    memory = container.get("memory_limit")
    return TOOL_UNITS["code_interpreter"] if memory in (None, "1g") else f"{TOOL_UNITS['code_interpreter']}:{memory}"


def max_tool_calls(options: Mapping[str, Any]) -> int | None:
    """The ``max_tool_calls`` option (the wire's own, sent as it is): the most built-in tool calls a call makes."""
    value = options.get("max_tool_calls")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"options.max_tool_calls must be an integer of 0 or more, got {value!r:.40}")
    return value


def _schema(value: object) -> FrozenMap | None:
    """A JSON Schema of an object (the manager checks it further with ``provmw.structured.schema_of``)."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or value.get("type") != "object":
        raise ConfigurationError('response_schema must be a JSON Schema object describing an object at its root '
                                 '("type": "object")')
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
    response_schema: FrozenMap | None = attrs.field(default=None, converter=_schema)
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
        """The bound of the input tokens of what is sent; a ``previous_response_id``'s stored conversation,
        which the provider bills as input too, is not sent and not in it."""
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

    def unknown_worst_case(self, options: Mapping[str, Any]) -> str | None:
        """Why no bound before sending holds what this call may be billed (None: one does), for a strict
        budget's refusal: a stored conversation continued, or built-in tools, whose results the model reads
        as input tokens (pages found, file chunks, code output) that no bound before sending can see."""
        if self.previous_response_id is not None:
            return ("it continues a stored conversation (previous_response_id), which the provider bills as input "
                    "again and no bound before sending can see; send its items with store=false instead, or use "
                    "the budget's estimate mode")
        if self.builtin_tools and max_tool_calls(options) is None:
            return (f"its built-in tools ({', '.join(self.builtin_tools)}) are billed per call and it sets no "
                    "max_tool_calls; set options.max_tool_calls, or use the budget's estimate mode")
        if self.builtin_tools:
            return (f"its built-in tools' results ({', '.join(self.builtin_tools)}) are read as input tokens that "
                    "no bound before sending can see; use the budget's estimate mode for such calls")
        return None

    def most_units(self, options: Mapping[str, Any]) -> Mapping[str, float]:
        """The built-in tools' fees at worst: ``max_tool_calls`` calls of each search tool asked (a bound
        above the dearest one's alone when both are), and the container a code interpreter opens; an
        unknown worst case is the :data:`UNPRICEABLE` unit."""
        if self.previous_response_id is not None or (self.builtin_tools and max_tool_calls(options) is None):
            return {UNPRICEABLE: 1.0}
        calls = float(max_tool_calls(options) or 0)
        units = {TOOL_UNITS[t]: calls for t in self.builtin_tools if t != "code_interpreter"}
        session = code_interpreter_unit(options) if "code_interpreter" in self.builtin_tools else None
        return units if session is None else {**units, session: 1.0}

    def deterministic(self, options: Mapping[str, Any]) -> bool:
        """Temperature 0 (the Responses wire takes no seed); never a call that continues or keeps a stored
        response, nor one with built-in tools, which read what changes outside it (the web, a vector store)."""
        if self.previous_response_id is not None or self.store or self.builtin_tools:
            return False
        return options.get("temperature") == 0

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
