"""Typed requests the ServiceManager captures in its terminal callables, and their canonical digest."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from json.encoder import encode_basestring
from typing import Any

import attrs

from provmw.config import ProviderConfig
from provmw.context import FrozenMap, ProviderOperation
from provmw.errors import ConfigurationError
from provmw.messages import Message, TextPart, ToolSpec, tools_from
from provmw.operations import OperationRequest

__all__ = [
    "ChatRequest",
    "CompletionRequest",
    "EmbeddingRequest",
    "ProviderRequest",
    "is_deterministic",
    "merged_options",
    "request_digest",
]


def _frozen(value: Mapping[str, Any] | None) -> FrozenMap:
    return value if isinstance(value, FrozenMap) else FrozenMap(value)


def _messages(value: Iterable[Message]) -> tuple[Message, ...]:
    messages = _all_of(value, Message, "messages")
    if not messages:
        raise ConfigurationError("messages must not be empty")
    return messages


def _texts(value: Iterable[str]) -> tuple[str, ...]:
    texts = _all_of(value, str, "inputs")
    if not texts:
        raise ConfigurationError("inputs must hold at least one string")
    return texts


def _all_of(value: object, kind: type[Any], where: str) -> tuple[Any, ...]:
    # A caller's wrong type is a ConfigurationError here, not an AttributeError in an adapter.
    # The manager passes tuples: they skip the slower abstract-class checks.
    if type(value) is not tuple:
        if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
            raise ConfigurationError(f"{where} must be a list of {kind.__name__}, got {type(value).__name__}")
        value = tuple(value)
    for item in value:
        if not isinstance(item, kind):
            index = value.index(item)
            raise ConfigurationError(f"{where}[{index}] must be a {kind.__name__}, got {type(item).__name__}")
    return value


def _prompt(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise ConfigurationError(f"prompt must be a string, got {type(value).__name__}")


def _dimensions(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigurationError(f"dimensions must be a positive integer, got {value!r}")


@attrs.frozen
class ChatRequest:
    """Messages (with any images), optional tools, per-call options, and the JSON Schema the
    answer must follow (``response_schema``, a plain JSON Schema object) when one was asked."""

    messages: tuple[Message, ...] = attrs.field(converter=_messages)
    tools: tuple[ToolSpec, ...] = attrs.field(default=(), converter=tools_from)
    options: FrozenMap = attrs.field(factory=FrozenMap, converter=_frozen)
    response_schema: FrozenMap | None = attrs.field(default=None, converter=attrs.converters.optional(_frozen))

    def __attrs_post_init__(self) -> None:
        if self.response_schema is not None and "response_format" in self.options:
            raise ConfigurationError("give response_schema or the response_format option, not both: "
                                     "response_schema asks for JSON that follows the schema")

    def to_dict(self) -> dict[str, Any]:
        body = {
            "messages": [m.to_dict() for m in self.messages],
            "tools": [t.to_dict() for t in self.tools],
            "options": _plain(self.options),
        }
        # Only when given, so that the digest of every request without one stays what it was.
        if self.response_schema is not None:
            body["response_schema"] = _plain(self.response_schema)
        return body


@attrs.frozen
class CompletionRequest:
    """A bare prompt to complete, and per-call options."""

    prompt: str = attrs.field(validator=_prompt)
    options: FrozenMap = attrs.field(factory=FrozenMap, converter=_frozen)

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "options": _plain(self.options)}


@attrs.frozen
class EmbeddingRequest:
    """Texts to embed, in order, and an optional output dimension."""

    inputs: tuple[str, ...] = attrs.field(converter=_texts)
    dimensions: int | None = attrs.field(default=None, validator=_dimensions)

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": list(self.inputs), "dimensions": self.dimensions}


ProviderRequest = ChatRequest | CompletionRequest | EmbeddingRequest | OperationRequest


def merged_options(config: ProviderConfig, request_options: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration's options overridden by the call's."""
    return {**config.options, **request_options}


def request_digest(operation: ProviderOperation, config: ProviderConfig, request: ProviderRequest) -> str:
    """A stable hex digest of everything that changes the answer, for nobody in particular.

    Canonical JSON (sorted keys, no whitespace) of the operation, provider, model, base URL,
    the credentials' fingerprint (an answer made with one account's key is never served to
    another key) and the request with its merged options, hashed with SHA-256: the same in every
    process and Python version, unlike ``hash()``. Only namespaces marked shared use it
    bare; every other cache key is bound to the caller (:func:`provmw.context.scoped_key`).
    """
    return hashlib.sha256(_canonical_text(operation, config, request).encode("utf-8")).hexdigest()


def _canonical_text(operation: ProviderOperation, config: ProviderConfig, request: ProviderRequest) -> str:
    """The canonical JSON :func:`request_digest` hashes.

    Sorted-key JSON is made of its parts (a dict's text is its keys' texts in order), so the
    fixed fields and a chat's messages and text parts are written here field by field and
    only the rest (options, tools, images, tool calls) goes through the encoder: the same
    text, byte for byte, as ``json.dumps(..., sort_keys=True)`` of the whole (a property
    test holds it), at a third of the cost. The keys below are in sorted order.
    """
    head, own_options = _config_text(operation, config)
    return f"{head}{_request_text(config, request, own_options)}}}"


# A configuration's part of every digest, written once: its fields, and its options for the
# chats that give none of their own (most calls). By id, each entry keeping its configuration
# alive so that no id is reused meanwhile; ad-hoc configurations are new objects each call.
_CONFIG_TEXTS_KEPT = 256
_config_texts: dict[tuple[int, ProviderOperation], tuple[ProviderConfig, str, str]] = {}


def _config_text(operation: ProviderOperation, config: ProviderConfig) -> tuple[str, str]:
    key = (id(config), operation)
    kept = _config_texts.get(key)
    if kept is not None and kept[0] is config:
        return kept[1], kept[2]
    head = (f'{{"base_url":{_string(config.base_url)},"credentials":{_string(config.credential_fingerprint)},'
            f'"model":{_string(config.model)},"operation":{_string(operation.value)},'
            f'"provider":{_string(config.provider)},"request":')
    own_options = _options_text(config.options)
    if len(_config_texts) >= _CONFIG_TEXTS_KEPT:
        _config_texts.clear()
    _config_texts[key] = (config, head, own_options)
    return head, own_options


# One encoder for every digest: json.dumps would build one per call.
_sorted_json = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def _string(value: str | None) -> str:
    return "null" if value is None else encode_basestring(value)


def _request_text(config: ProviderConfig, request: ProviderRequest, own_options: str) -> str:
    if not isinstance(request, ChatRequest):
        body = request.to_dict()
        if "options" in body:
            body["options"] = _plain(merged_options(config, body["options"]))
        return _sorted_json(body)
    schema = "" if request.response_schema is None else \
        f',"response_schema":{_sorted_json(_plain(request.response_schema))}'
    tools = _sorted_json([t.to_dict() for t in request.tools]) if request.tools else "[]"
    options = _options_text(merged_options(config, request.options)) if request.options else own_options
    return (f'{{"messages":[{",".join(map(_message_text, request.messages))}],'
            f'"options":{options}{schema},"tools":{tools}}}')


def _options_text(options: Mapping[str, Any]) -> str:
    # Options are mostly flat (a temperature, max_tokens, a seed): written here as the encoder
    # would (bool before int: a bool is an int); anything else goes through it.
    try:
        names = sorted(options)
    except TypeError:  # names of mixed types: the encoder sorts them as strings
        return _sorted_json(_plain(options))
    items = []
    for name in names:
        value = options[name]
        kind = type(value)
        if type(name) is not str or (kind is float and not math.isfinite(value)):
            return _sorted_json(_plain(options))
        if kind is str:
            items.append(f"{encode_basestring(name)}:{encode_basestring(value)}")
        elif kind is int or kind is float:
            items.append(f"{encode_basestring(name)}:{value!r}")
        elif value is None or kind is bool:
            items.append(f"{encode_basestring(name)}:{_LITERALS[value]}")
        else:
            return _sorted_json(_plain(options))
    return f"{{{','.join(items)}}}"


_LITERALS = {None: "null", True: "true", False: "false"}


def _message_text(message: Message) -> str:
    calls = "" if not message.tool_calls else f',"tool_calls":{_sorted_json([c.to_dict() for c in message.tool_calls])}'
    call_id = "" if message.tool_call_id is None else f',"tool_call_id":{_string(message.tool_call_id)}'
    parts = ",".join(f'{{"text":{_string(p.text)},"type":"text"}}' if type(p) is TextPart else _sorted_json(p.to_dict())
                     for p in message.content)
    return f'{{"content":[{parts}],"role":{_string(message.role)}{call_id}{calls}}}'


def is_deterministic(config: ProviderConfig, request: ProviderRequest) -> bool:
    """Whether the same request should give the same answer: temperature 0 or a seed (an operation
    beyond chat says for itself, ``OperationRequest.deterministic``)."""
    if isinstance(request, EmbeddingRequest):
        return True
    if not isinstance(request, ChatRequest | CompletionRequest):
        return request.deterministic(merged_options(config, request.options))
    call, own = request.options, config.options  # merged_options, read without merging
    temperature = call["temperature"] if "temperature" in call else own.get("temperature")
    return temperature == 0 or (call["seed"] if "seed" in call else own.get("seed")) is not None


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
