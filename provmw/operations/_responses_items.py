"""The Responses API's items (``provmw.operations.responses_api`` documents them): each a frozen value
whose ``to_dict`` is its wire form, read back by ``item_from_dict``; and what a request reads of them
(their texts, their size, their canonical form for the cache key)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal

import attrs

from provmw.errors import ConfigurationError
from provmw.messages import ImagePart, Message, TextPart

__all__ = ["FunctionCall", "FunctionCallOutput", "InputItem", "ItemRole", "MessageItem", "OutputItem",
           "ReasoningItem", "canonical", "input_items", "item_from_dict", "item_text", "item_texts", "optional_text",
           "with_item_texts"]

ItemRole = Literal["user", "assistant", "system", "developer"]
_ROLES = ("user", "assistant", "system", "developer")


def _text(owner: str, field: str, value: object, *, empty: bool = True) -> str:
    if not isinstance(value, str) or (not empty and not value):
        got = "an empty string" if value == "" else type(value).__name__
        raise ConfigurationError(f"{owner}.{field} must be a {'' if empty else 'non-empty '}string, got {got}")
    return value


def _checked(empty: bool = True) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        _text(type(instance).__name__, attribute.name, value, empty=empty)
    return check


def optional_text(empty: bool = True) -> Any:
    return attrs.validators.optional(_checked(empty))


def _parts(value: object) -> tuple[TextPart | ImagePart, ...]:
    if isinstance(value, str):
        return (TextPart(value),)
    if isinstance(value, bytes | Mapping) or not hasattr(value, "__iter__"):
        raise ConfigurationError(f"MessageItem.content must be a string or text and image parts, got "
                                 f"{type(value).__name__}")
    parts = tuple(value)
    if not all(isinstance(p, TextPart | ImagePart) for p in parts):
        raise ConfigurationError("MessageItem.content must hold only TextPart and ImagePart values")
    return parts


def _role(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in _ROLES:
        raise ConfigurationError(f"MessageItem.role must be one of {', '.join(_ROLES)}, got {value!r}")


@attrs.frozen
class MessageItem:
    """A message: a role and its text and image parts; ``id`` is the provider's, on an answer's message."""

    role: ItemRole = attrs.field(validator=_role)
    content: tuple[TextPart | ImagePart, ...] = attrs.field(default=(), converter=_parts)
    id: str | None = attrs.field(default=None, validator=optional_text(empty=False))

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def images(self) -> tuple[ImagePart, ...]:
        return tuple(p for p in self.content if isinstance(p, ImagePart))

    def to_dict(self) -> dict[str, Any]:
        kind = "output_text" if self.role == "assistant" else "input_text"
        content = [{"type": kind, "text": p.text} if isinstance(p, TextPart)
                   else {"type": "input_image", "image_url": p.data_url, "detail": "auto"} for p in self.content]
        out: dict[str, Any] = {"type": "message", "role": self.role, "content": content}
        return out if self.id is None else {**out, "id": self.id}


@attrs.frozen
class FunctionCall:
    """A call of a function tool the model made: ``arguments`` is the JSON text it wrote."""

    call_id: str = attrs.field(validator=_checked(empty=False))
    name: str = attrs.field(validator=_checked(empty=False))
    arguments: str = attrs.field(default="{}", validator=_checked())
    id: str | None = attrs.field(default=None, validator=optional_text(empty=False))

    def to_dict(self) -> dict[str, Any]:
        out = {"type": "function_call", "call_id": self.call_id, "name": self.name, "arguments": self.arguments}
        return out if self.id is None else {**out, "id": self.id}


@attrs.frozen
class FunctionCallOutput:
    """What a function tool answered to the call ``call_id``."""

    call_id: str = attrs.field(validator=_checked(empty=False))
    output: str = attrs.field(validator=_checked())

    def to_dict(self) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": self.call_id, "output": self.output}


def _summary(value: object) -> tuple[str, ...]:
    summary = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, list | tuple) else None
    if summary is None or not all(isinstance(s, str) for s in summary):
        raise ConfigurationError(f"ReasoningItem.summary must be a list of strings, got {type(value).__name__}")
    return summary


@attrs.frozen
class ReasoningItem:
    """A reasoning model's thinking: its summary texts, and its ``encrypted_content`` (opaque, for sending back)."""

    id: str = attrs.field(validator=_checked(empty=False))
    summary: tuple[str, ...] = attrs.field(default=(), converter=_summary)
    encrypted_content: str | None = attrs.field(default=None, validator=optional_text())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "reasoning", "id": self.id,
                               "summary": [{"type": "summary_text", "text": s} for s in self.summary]}
        return out if self.encrypted_content is None else {**out, "encrypted_content": self.encrypted_content}


InputItem = MessageItem | FunctionCall | FunctionCallOutput | ReasoningItem
OutputItem = MessageItem | FunctionCall | ReasoningItem
_ITEMS = (MessageItem, FunctionCall, FunctionCallOutput, ReasoningItem)


def input_items(value: object) -> tuple[InputItem, ...]:
    """A request's input: a string (one user message), an item, or a non-empty list of items and item dicts."""
    if isinstance(value, str):
        return (MessageItem("user", value),)
    if isinstance(value, _ITEMS):
        return (value,)
    if isinstance(value, bytes | Mapping) or not isinstance(value, list | tuple):
        raise ConfigurationError(f"input must be a string or a list of items, got {type(value).__name__}")
    if not value:
        raise ConfigurationError("input must not be empty")
    return tuple(v if isinstance(v, _ITEMS) else item_from_dict(v, f"input[{i}]") for i, v in enumerate(value))


def _get(data: Mapping[str, Any], key: str, where: str, *, default: Any = ...) -> Any:
    value = data.get(key)
    if value is None and default is not ...:
        return default
    if not isinstance(value, str):
        raise ConfigurationError(f"{where}.{key} must be a string, got {type(value).__name__}")
    return value


def item_from_dict(value: object, where: str = "item") -> InputItem:
    """An item from its wire dict (``to_dict``'s form; a message may leave out ``type``)."""
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where} must be an item or an item dict, got {type(value).__name__}")
    kind = value.get("type", "message" if "role" in value else None)
    if kind == "message":
        content = value.get("content")
        parts = content if isinstance(content, str) else \
            tuple(_part(p, f"{where}.content[{i}]") for i, p in enumerate(_list(content, f"{where}.content")))
        return MessageItem(_get(value, "role", where), parts, _get(value, "id", where, default=None))
    if kind == "function_call":
        return FunctionCall(_get(value, "call_id", where), _get(value, "name", where),
                            _get(value, "arguments", where, default="{}"), _get(value, "id", where, default=None))
    if kind == "function_call_output":
        return FunctionCallOutput(_get(value, "call_id", where), _get(value, "output", where))
    if kind == "reasoning":
        summary = [_get(s, "text", f"{where}.summary[{i}]") if isinstance(s, Mapping) else s
                   for i, s in enumerate(_list(value.get("summary", []), f"{where}.summary"))]
        return ReasoningItem(_get(value, "id", where), summary, _get(value, "encrypted_content", where, default=None))
    raise ConfigurationError(f"{where}.type must be message, function_call, function_call_output or reasoning, "
                             f"got {kind!r}")


def _list(value: object, where: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise ConfigurationError(f"{where} must be a list, got {type(value).__name__}")
    return value


def _part(value: object, where: str) -> TextPart | ImagePart:
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where} must be a content part dict, got {type(value).__name__}")
    kind = value.get("type")
    if kind in ("input_text", "output_text", "text"):
        return TextPart(_get(value, "text", where))
    if kind in ("input_image", "image_url", "image"):
        # Message.from_dict reads OpenAI's and provmw's image parts: an input_image is its image_url form.
        url = value.get("image_url")
        shaped = {"type": "image_url", "image_url": {"url": url}} if isinstance(url, str) else dict(value)
        part = Message.from_dict({"role": "user", "content": [shaped]}).content[0]
        assert isinstance(part, TextPart | ImagePart)
        return part
    raise ConfigurationError(f"{where}.type must be input_text, output_text or input_image, got {kind!r}")


def item_text(item: InputItem) -> str:
    if isinstance(item, MessageItem):
        return item.text
    if isinstance(item, FunctionCall):
        return item.call_id + item.name + item.arguments
    if isinstance(item, FunctionCallOutput):
        return item.call_id + item.output
    return "".join(item.summary) + (item.encrypted_content or "")


def item_texts(item: InputItem) -> tuple[str, ...]:
    if isinstance(item, MessageItem):
        return tuple(p.text for p in item.content if isinstance(p, TextPart))
    if isinstance(item, FunctionCall):
        return (item.arguments,)
    if isinstance(item, FunctionCallOutput):
        return (item.output,)
    return item.summary


def with_item_texts(item: InputItem, given: Any) -> InputItem:
    if isinstance(item, MessageItem):
        return attrs.evolve(item, content=tuple(TextPart(next(given)) if isinstance(p, TextPart) else p
                                                for p in item.content))
    if isinstance(item, FunctionCall):
        return attrs.evolve(item, arguments=next(given))
    if isinstance(item, FunctionCallOutput):
        return attrs.evolve(item, output=next(given))
    return attrs.evolve(item, summary=tuple(next(given) for _ in item.summary))


def canonical(item: InputItem) -> dict[str, Any]:
    out = item.to_dict()
    if isinstance(item, MessageItem) and item.images:
        out["content"] = [{"type": "input_text", "text": p.text} if isinstance(p, TextPart) else
                          {"type": "input_image", "url": p.url} if p.url is not None else
                          {"type": "input_image", "sha256": hashlib.sha256(p.data or b"").hexdigest(),
                           "media_type": p.media_type} for p in item.content]
    return out
