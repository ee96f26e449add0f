"""Typed messages, content parts, tool specifications and tool calls."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, cast

import attrs

from provmw._base import serde
from provmw.context import FrozenMap
from provmw.errors import ConfigurationError, InvalidDataError

__all__ = ["ContentPart", "ImagePart", "Message", "Role", "TextPart", "ToolCall", "ToolSpec", "messages_from",
           "tools_from"]

Role = Literal["system", "user", "assistant", "tool"]
_ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")


def _text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise ConfigurationError(f"{type(instance).__name__}.{attribute.name} must be a string, "
                                 f"got {type(value).__name__}")


def _optional_text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _text(instance, attribute, value)


@attrs.frozen
class TextPart:
    """A piece of text inside a message."""

    text: str = attrs.field(validator=_text)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


def _check_image(instance: ImagePart, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(instance.url, str | None) or not isinstance(instance.data, bytes | None):
        raise ConfigurationError(f"an image part needs url as a string or data as bytes, got url "
                                 f"{type(instance.url).__name__} and data {type(instance.data).__name__}")
    _text(instance, attribute, value)
    if (instance.url is None) == (instance.data is None):
        raise ConfigurationError("an image part needs exactly one of url or data")
    if instance.data is not None and not instance.media_type.startswith("image/"):
        raise ConfigurationError(f"media_type must be an image type, got {instance.media_type!r}")


@attrs.frozen
class ImagePart:
    """An image given by URL, or by its bytes with a media type."""

    url: str | None = None
    data: bytes | None = None
    media_type: str = attrs.field(default="image/png", validator=_check_image)

    @property
    def data_url(self) -> str:
        """The image as a URL: its own, or a ``data:`` URL holding its bytes."""
        if self.url is not None:
            return self.url
        return f"data:{self.media_type};base64,{self.base64}"

    @property
    def base64(self) -> str:
        assert self.data is not None
        return base64.b64encode(self.data).decode("ascii")

    def to_dict(self) -> dict[str, Any]:
        if self.url is not None:
            return {"type": "image", "url": self.url}
        return {"type": "image", "data": self.base64, "media_type": self.media_type}


ContentPart = TextPart | ImagePart


def _freeze_schema(value: Mapping[str, Any]) -> FrozenMap:
    if isinstance(value, FrozenMap):
        return value
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"ToolSpec.parameters must be a JSON schema (a mapping), got {type(value).__name__}")
    try:  # one pass in C: NaN, infinity, objects JSON cannot hold and runaway nesting all fail it
        return FrozenMap(json.loads(json.dumps(value, allow_nan=False)))
    except (ValueError, TypeError, RecursionError) as exc:
        raise ConfigurationError(f"ToolSpec.parameters must be a JSON schema: {exc}") from None


def _tool_name(instance: ToolSpec, attribute: attrs.Attribute[Any], value: object) -> None:
    _text(instance, attribute, value)
    if not value:
        raise ConfigurationError("ToolSpec.name must not be empty")


@attrs.frozen
class ToolSpec:
    """A tool the model may call: its name, what it does, and a JSON schema of its arguments."""

    name: str = attrs.field(validator=_tool_name)
    description: str = attrs.field(default="", validator=_text)
    parameters: FrozenMap = attrs.field(
        factory=lambda: FrozenMap({"type": "object", "properties": {}}), converter=_freeze_schema
    )

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}

    @classmethod
    def from_dict(cls, value: object) -> ToolSpec:
        data = serde.mapping(value, "tool")
        return cls(
            name=serde.get(data, "name", str, "tool"),
            description=serde.get(data, "description", str, "tool", default=""),
            parameters=serde.mapping(data.get("parameters", {}), "tool.parameters"),
        )


@attrs.frozen
class ToolCall:
    """A call the model asked for; ``arguments`` is the JSON text the model wrote."""

    id: str = attrs.field(validator=_text)
    name: str = attrs.field(validator=_text)
    arguments: str = attrs.field(default="{}", validator=_text)

    def parsed_arguments(self) -> Any:
        """The arguments decoded from JSON; raises ``InvalidDataError`` if the model wrote bad JSON."""
        try:
            return json.loads(self.arguments)
        except ValueError as exc:
            raise InvalidDataError(f"tool call {self.name!r} has arguments that are not JSON") from exc

    @property
    def args(self) -> dict[str, Any]:
        """The arguments as the JSON object a tool takes, ready for ``tool(**call.args)``; raises
        ``InvalidDataError`` naming the tool when the model wrote bad JSON or a non-object."""
        value = self.parsed_arguments()
        if not isinstance(value, dict):
            raise InvalidDataError(f"tool call {self.name!r} has arguments that are JSON "
                                   f"{type(value).__name__}, not an object")
        return value

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, value: object) -> ToolCall:
        data = serde.mapping(value, "tool_call")
        return cls(
            id=serde.get(data, "id", str, "tool_call"),
            name=serde.get(data, "name", str, "tool_call"),
            arguments=serde.get(data, "arguments", str, "tool_call"),
        )


def _to_parts(value: str | Sequence[ContentPart]) -> tuple[ContentPart, ...]:
    if isinstance(value, str):
        return (TextPart(value),)
    parts = _items(value, "message content")
    for part in parts:
        if not isinstance(part, TextPart | ImagePart):
            raise ConfigurationError(f"message content must be text or image parts, got {part!r}")
    return parts


def _tool_calls(value: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
    calls = _items(value, "Message.tool_calls")
    for call in calls:
        if not isinstance(call, ToolCall):
            raise ConfigurationError(f"Message.tool_calls must hold ToolCall values, got {type(call).__name__}")
    return calls


def _items(value: object, where: str) -> tuple[Any, ...]:
    if type(value) is tuple:  # the common case, without the slower abstract-class checks
        return value
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ConfigurationError(f"{where} must be a list, got {type(value).__name__}")
    return tuple(value)


def _check_role(instance: Message, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in _ROLES:
        raise ConfigurationError(f"role must be one of {', '.join(_ROLES)}, got {value!r}")


@attrs.frozen
class Message:
    """One turn of a conversation."""

    role: Role = attrs.field(validator=_check_role)
    content: tuple[ContentPart, ...] = attrs.field(default=(), converter=_to_parts)
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tool_calls)
    tool_call_id: str | None = attrs.field(default=None, validator=_optional_text)

    @classmethod
    def system(cls, text: str) -> Message:
        return cls("system", text)

    @classmethod
    def user(cls, content: str | Sequence[ContentPart]) -> Message:
        return cls("user", content)

    @classmethod
    def assistant(cls, text: str = "", tool_calls: Sequence[ToolCall] = ()) -> Message:
        return cls("assistant", text if text else (), tuple(tool_calls))

    @classmethod
    def tool(cls, tool_call_id: str, text: str) -> Message:
        return cls("tool", text, tool_call_id=tool_call_id)

    # Both read several times a call (needs, estimates, the adapter's body): a message of one
    # text part, most of them, answers without a generator.
    @property
    def text(self) -> str:
        """The text parts joined together."""
        content = self.content
        if len(content) == 1 and type(content[0]) is TextPart:
            return content[0].text
        return "".join(p.text for p in content if isinstance(p, TextPart))

    @property
    def images(self) -> tuple[ImagePart, ...]:
        content = self.content
        if len(content) == 1 and type(content[0]) is TextPart:
            return ()
        return tuple(p for p in content if isinstance(p, ImagePart))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": [p.to_dict() for p in self.content]}
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out

    @classmethod
    def from_dict(cls, value: object) -> Message:
        """A message from provmw's own dict form (``to_dict``) or from an OpenAI chat message dict;
        a bad field is a ``ConfigurationError`` naming it."""
        return _message_from(value, "message")


def messages_from(value: object) -> tuple[Message, ...]:
    """The one conversion of a call's messages: a string (one user message), a ``Message``, or a
    non-empty list of ``Message`` values and message dicts (provmw's or OpenAI's shape)."""
    if isinstance(value, str):
        return (Message.user(value),)
    if isinstance(value, Message):
        return (value,)
    items = _items(value, "messages")
    if not items:
        raise ConfigurationError("messages must be a string, a Message, or a non-empty list of messages")
    if all(type(m) is Message for m in items):  # the common case, without building a new tuple
        return items
    return tuple(m if isinstance(m, Message) else _message_from(m, f"messages[{i}]") for i, m in enumerate(items))


def tools_from(value: object) -> tuple[ToolSpec, ...]:
    """The one conversion of a call's tools: ``ToolSpec`` values and tool dicts, in OpenAI's shape
    (``{"type": "function", "function": {"name", "description", "parameters"}}``) or provmw's."""
    if type(value) is tuple and all(type(t) is ToolSpec for t in value):
        return value
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ConfigurationError(f"tools must be a list of ToolSpec values or tool dicts, got {type(value).__name__}")
    return tuple(t if isinstance(t, ToolSpec) else _tool_from(t, f"tools[{i}]") for i, t in enumerate(value))


def _tool_from(value: object, where: str) -> ToolSpec:
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where} must be a ToolSpec or a tool dict, got {type(value).__name__}")
    if "function" in value:  # OpenAI's shape wraps provmw's
        if value.get("type", "function") != "function":
            raise ConfigurationError(f"{where}.type must be 'function', got {value.get('type')!r}")
        return _tool_from(value["function"], f"{where}.function")
    return ToolSpec(_field(value, "name", str, where), _field(value, "description", str, where, required=False) or "",
                    value.get("parameters", {"type": "object", "properties": {}}))


# Caller input is checked here, once, and named by its place in the call ("messages[2].content[0].text").
def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where} must be a message dict (a mapping), got {type(value).__name__}")
    return value


def _field(data: Mapping[str, Any], key: str, kind: type, where: str, *, required: bool = True) -> Any:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, kind):
        got = "nothing" if value is None else type(value).__name__
        raise ConfigurationError(f"{where}.{key} must be a {kind.__name__}, got {got}")
    return value


def _message_from(value: object, where: str) -> Message:
    data = _mapping(value, where)
    role = _field(data, "role", str, where)
    role = "system" if role == "developer" else role  # OpenAI's newer name for the system turn
    if role not in _ROLES:
        raise ConfigurationError(f"{where}.role must be one of {', '.join(_ROLES)}, got {role!r}")
    calls = _items(data.get("tool_calls") or (), f"{where}.tool_calls")
    return Message(cast(Role, role), _content_from(data.get("content"), f"{where}.content"),
                   tuple(_tool_call_from(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(calls)),
                   tool_call_id=_field(data, "tool_call_id", str, where, required=False))


def _content_from(value: object, where: str) -> tuple[ContentPart, ...]:
    if value is None:  # an OpenAI assistant turn that only calls tools
        return ()
    if isinstance(value, str):
        return (TextPart(value),)
    return tuple(_part_from(p, f"{where}[{i}]") for i, p in enumerate(_items(value, where)))


def _part_from(value: object, where: str) -> ContentPart:
    data = _mapping(value, where)
    kind = data.get("type")
    if kind == "text":
        return TextPart(_field(data, "text", str, where))
    if kind == "image_url":  # OpenAI: {"image_url": {"url": ...}}, a data: URL carrying the bytes
        image = data.get("image_url")
        url = image if isinstance(image, str) else _field(_mapping(image, f"{where}.image_url"), "url", str,
                                                          f"{where}.image_url")
        return _image_from_url(url, f"{where}.image_url.url")
    if kind == "image":  # provmw's own form, as ImagePart.to_dict writes it
        encoded = _field(data, "data", str, where, required=False)
        return ImagePart(url=_field(data, "url", str, where, required=False),
                         data=None if encoded is None else _decoded(encoded, f"{where}.data"),
                         media_type=_field(data, "media_type", str, where, required=False) or "image/png")
    raise ConfigurationError(f"{where}.type must be text, image_url or image, got {kind!r}")


def _image_from_url(url: str, where: str) -> ImagePart:
    header, comma, encoded = url.partition(",")
    if not (url.startswith("data:") and comma and header.endswith(";base64")):
        return ImagePart(url=url)
    return ImagePart(data=_decoded(encoded, where), media_type=header[len("data:"):-len(";base64")])


def _decoded(encoded: str, where: str) -> bytes:
    try:
        return base64.b64decode(encoded, validate=True)
    except ValueError:
        raise ConfigurationError(f"{where} is not valid base64") from None


def _tool_call_from(value: object, where: str) -> ToolCall:
    data = _mapping(value, where)
    call_id = _field(data, "id", str, where)
    if "function" not in data:  # provmw's own form
        return ToolCall(call_id, _field(data, "name", str, where), _field(data, "arguments", str, where))
    function = _mapping(data["function"], f"{where}.function")
    return ToolCall(call_id, _field(function, "name", str, f"{where}.function"),
                    _field(function, "arguments", str, f"{where}.function", required=False) or "{}")
