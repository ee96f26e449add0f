"""Typed requests the ServiceManager captures in its terminal callables, and their canonical digest."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from provmw.config import ProviderConfig
from provmw.context import FrozenMap, ProviderOperation
from provmw.errors import ConfigurationError
from provmw.messages import Message, ToolSpec, tools_from

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


ProviderRequest = ChatRequest | CompletionRequest | EmbeddingRequest


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
    body = request.to_dict()
    if "options" in body:
        body["options"] = _plain(merged_options(config, body["options"]))
    canonical = {
        "operation": operation.value,
        "provider": config.provider,
        "model": config.model,
        "base_url": config.base_url,
        "credentials": config.credential_fingerprint,
        "request": body,
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def is_deterministic(config: ProviderConfig, request: ProviderRequest) -> bool:
    """Whether the same request should give the same answer: temperature 0 or a seed."""
    if isinstance(request, EmbeddingRequest):
        return True
    options = merged_options(config, request.options)
    return options.get("temperature") == 0 or options.get("seed") is not None


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
