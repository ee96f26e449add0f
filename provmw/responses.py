"""Typed, frozen responses, one per kind of answer, each with ``to_dict``/``from_dict``.

``to_dict`` returns plain JSON types and ``from_dict(to_dict(r)) == r`` for every
response: the cache stores these dicts, never pickles. ``from_dict`` raises
``InvalidDataError`` naming the field for anything else.
"""

from __future__ import annotations

import binascii
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Literal, TypeVar

import attrs

from provmw._base import serde
from provmw.errors import ConfigurationError, InvalidDataError
from provmw.messages import ToolCall

__all__ = [
    "Attempt",
    "Billed",
    "ChatChunk",
    "CompletionResponse",
    "Counts",
    "EmbeddingResponse",
    "ProviderResponse",
    "RateLimitHint",
    "Usage",
    "VisionResponse",
    "response_from_dict",
]

R = TypeVar("R", bound="ProviderResponse")

# Whether an attempt was billed: "no" (never sent, or answered with an error status), "yes",
# "unknown" (sent, usage unknown: a timeout, a cut connection; or answered by a model without a
# price, so its cost is unknown), "estimated" (billed, but the
# provider's usage never came: a stream cut or left early, counted from what was streamed).
Billed = Literal["yes", "no", "unknown", "estimated"]


@attrs.frozen(kw_only=True)
class Counts:
    """The counters an answer's ``Usage`` and the ledger's ``UsageRecord`` share, declared once.

    ``input_tokens`` counts every input token, cache reads and writes included;
    ``cached_input_tokens`` (cache reads) and the cache writes by TTL are parts of it.
    ``output_tokens`` counts every output token; ``reasoning_tokens`` is the part spent
    thinking. ``cost_usd`` is what they cost, once priced.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = None


_NO_UNITS: Mapping[str, float] = MappingProxyType({})


def _plain_units(instance: object, field: attrs.Attribute[Any] | None, value: Any) -> Any:
    """For ``attrs.asdict``: a usage's units as a plain dict, as JSON takes them."""
    return dict(value) if isinstance(value, MappingProxyType) else value


def _units(value: Mapping[str, float]) -> Mapping[str, float]:
    if not value:
        return _NO_UNITS
    for unit, count in value.items():
        if isinstance(count, bool) or not isinstance(count, int | float) or not 0 <= count < float("inf"):
            raise ConfigurationError(f"usage.units.{unit}: expected a count of 0 or more, got {count!r}")
    return MappingProxyType({str(unit): float(count) for unit, count in value.items()})


@attrs.frozen(kw_only=True)
class Usage(Counts):
    """Tokens a call consumed and, once priced, what it cost (ADR 0015; the counters: ``Counts``).

    A cache hit costs nothing: ``cost_usd`` is 0 and ``saved_cost_usd`` is what the answer
    cost when it was made.
    """

    saved_cost_usd: float | None = None
    # What was billed by other measures than tokens, by unit name (``image:1024x1024:high``,
    # ``audio_second``, ``character``, ``search_unit``; ADR 0053), each a count of 0 or more.
    units: Mapping[str, float] = attrs.field(factory=lambda: _NO_UNITS, converter=_units, repr=False, hash=False)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self, value_serializer=_plain_units)

    def __repr__(self) -> str:
        # Costs are sums of float prices (0.00012300000000000001): the repr shows 12 significant
        # digits, which hides that noise; the value itself keeps every digit for sums and checks.
        def shown(value: object) -> str:
            return repr(float(f"{value:.12g}")) if isinstance(value, float) else repr(value)

        fields = ", ".join(f"{field.name}={shown(getattr(self, field.name))}" for field in attrs.fields(type(self))
                           if field.name != "units" or self.units)
        return f"{type(self).__name__}({fields})"

    @classmethod
    def from_dict(cls, value: object) -> Usage:
        data = serde.mapping(value, "usage")
        counts = {name: serde.get(data, name, int, "usage", default=0) for name in _OPTIONAL_COUNTS}
        units = serde.get(data, "units", dict, "usage", default={})
        return cls(
            input_tokens=serde.get(data, "input_tokens", int, "usage"),
            output_tokens=serde.get(data, "output_tokens", int, "usage"),
            cost_usd=_cost(data, "cost_usd"), saved_cost_usd=_cost(data, "saved_cost_usd"),
            units={str(k): serde.finite(v, f"usage.units.{k}") for k, v in units.items()}, **counts,
        )


_OPTIONAL_COUNTS = ("cached_input_tokens", "cache_write_5m_tokens", "cache_write_1h_tokens", "reasoning_tokens")


def _cost(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    return None if value is None else serde.finite(value, f"usage.{key}")


@attrs.frozen(kw_only=True)
class Attempt:
    """One attempt an inner layer made: which configuration, and how it ended."""

    config_id: str
    error_type: str | None = None
    status: int | None = None

    @classmethod
    def from_dict(cls, value: object) -> Attempt:
        data = serde.mapping(value, "attempt")
        return cls(
            config_id=serde.get(data, "config_id", str, "attempt"),
            error_type=serde.get(data, "error_type", str, "attempt", default=None),
            status=serde.get(data, "status", int, "attempt", default=None),
        )


# A provider's rate-limit numbers are bounded before they are believed: a count past this, or a
# reset further than a day, is a broken header, not advice (a negative one too).
MAX_RATE_LIMIT_COUNT = 10**10
MAX_RATE_LIMIT_RESET_S = 24 * 3600.0


def _bounded_count(_: object, field: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or not 0 <= value <= MAX_RATE_LIMIT_COUNT):
        raise ConfigurationError(f"{field.name}: expected a count from 0 to {MAX_RATE_LIMIT_COUNT}, got {value!r}")


def _reset_or_none(value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_RATE_LIMIT_RESET_S:
        raise ConfigurationError(f"expected seconds from 0 to {MAX_RATE_LIMIT_RESET_S:g}, got {value!r}")
    return float(value)


@attrs.frozen(kw_only=True)
class RateLimitHint:
    """What a provider's answer said of its rate limits: requests and tokens left, and the seconds
    until each is refilled (``x-ratelimit-*``, ``anthropic-ratelimit-*`` headers; None: not said).

    Requests and tokens reset apart (a day's requests, a minute's tokens), so each has its own
    reset. Every number is bounded (:data:`MAX_RATE_LIMIT_COUNT`, :data:`MAX_RATE_LIMIT_RESET_S`).
    """

    remaining_requests: int | None = attrs.field(default=None, validator=_bounded_count)
    remaining_tokens: int | None = attrs.field(default=None, validator=_bounded_count)
    requests_reset_s: float | None = attrs.field(default=None, converter=_reset_or_none)
    tokens_reset_s: float | None = attrs.field(default=None, converter=_reset_or_none)

    @classmethod
    def from_dict(cls, value: object) -> RateLimitHint:
        data, where = serde.mapping(value, "rate_limit"), "rate_limit"
        resets = {key: None if (v := data.get(key)) is None else serde.finite(v, f"{where}.{key}")
                  for key in ("requests_reset_s", "tokens_reset_s")}
        try:
            return cls(remaining_requests=serde.get(data, "remaining_requests", int, where, default=None),
                       remaining_tokens=serde.get(data, "remaining_tokens", int, where, default=None), **resets)
        except ConfigurationError as exc:
            raise InvalidDataError(f"{where}: {exc}") from None


@attrs.frozen(kw_only=True)
class ProviderResponse:
    """What every response carries: who answered, what it cost, how it got here.

    ``response_id`` is the provider's own identifier of the answer (``chatcmpl-...``,
    ``msg_...``) when its adapter reports one, for tracing back to the provider's records.
    ``rate_limit`` is what the provider's answer said of its rate limits, when it said anything.
    """

    TYPE = "response"

    provider: str
    model: str
    response_id: str | None = None
    usage: Usage = attrs.field(factory=Usage)
    served_by: str = ""
    cached: bool = False
    attempts: tuple[Attempt, ...] = ()
    rate_limit: RateLimitHint | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types only, with a ``type`` discriminator."""
        return {"type": self.TYPE, **attrs.asdict(self, value_serializer=_plain_units)}

    @classmethod
    def from_dict(cls: type[R], value: object) -> R:
        """Rebuild from ``to_dict`` output; ``InvalidDataError`` names what is wrong."""
        data = serde.mapping(value, cls.TYPE)
        serde.check_type(data, cls.TYPE, cls.TYPE)
        try:
            return cls(**cls._fields_from(data))
        except (ConfigurationError, binascii.Error, TypeError) as exc:
            raise InvalidDataError(f"{cls.TYPE}: {exc}") from exc

    @classmethod
    def _fields_from(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        where = cls.TYPE
        attempts = serde.get(data, "attempts", list, where, default=[])
        return {
            "provider": serde.get(data, "provider", str, where),
            "model": serde.get(data, "model", str, where),
            "response_id": serde.get(data, "response_id", str, where, default=None),
            "usage": Usage.from_dict(data.get("usage")),
            "served_by": serde.get(data, "served_by", str, where, default=""),
            "cached": serde.get(data, "cached", bool, where, default=False),
            "attempts": tuple(Attempt.from_dict(a) for a in attempts),
            "rate_limit": _rate_limit(data),
        }


def _rate_limit(data: Mapping[str, Any]) -> RateLimitHint | None:
    value = data.get("rate_limit")
    return None if value is None else RateLimitHint.from_dict(value)


@attrs.frozen(kw_only=True)
class CompletionResponse(ProviderResponse):
    """A generated answer: text, tool calls, and why generation stopped.

    ``parsed`` is the answer's text as JSON when the call gave a ``response_schema``: it has
    been validated against it (plain JSON types; ``Model.model_validate(parsed)`` for pydantic).
    """

    TYPE = "completion"

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    parsed: Any = attrs.field(default=None, hash=False)

    @classmethod
    def _fields_from(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        where = cls.TYPE
        calls = serde.get(data, "tool_calls", list, where, default=[])
        return {
            **super()._fields_from(data),
            "text": serde.get(data, "text", str, where),
            "tool_calls": tuple(ToolCall.from_dict(c) for c in calls),
            "finish_reason": serde.get(data, "finish_reason", str, where, default=None),
            "parsed": data.get("parsed"),
        }


@attrs.frozen(kw_only=True)
class VisionResponse(CompletionResponse):
    """A generated answer to a prompt that carried images."""

    TYPE = "vision"


def _to_vectors(value: Any) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(x) for x in row) for row in value)


@attrs.frozen(kw_only=True)
class EmbeddingResponse(ProviderResponse):
    """One vector per input, in input order."""

    TYPE = "embedding"

    vectors: tuple[tuple[float, ...], ...] = attrs.field(default=(), converter=_to_vectors)

    @classmethod
    def _fields_from(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        rows = serde.get(data, "vectors", list, cls.TYPE)
        vectors = tuple(
            tuple(serde.finite(x, f"embedding.vectors[{i}]") for x in serde.sequence(row, f"embedding.vectors[{i}]"))
            for i, row in enumerate(rows)
        )
        return {**super()._fields_from(data), "vectors": vectors}


@attrs.frozen(kw_only=True)
class ChatChunk:
    """One piece of a streamed answer: text, or complete tool calls (each once, whole);
    the last one carries the finish reason and usage.

    Every chunk a stream hands out names the configuration that serves it (``served_by``)
    and the attempts before it (``attempts``), as ``CompletionResponse`` does. ``parsed``
    is set on the last chunk of a stream with a ``response_schema``: the answer as JSON,
    validated against it. ``rate_limit`` is on the first chunk an adapter hands out, when the
    provider's answer said anything of its rate limits (its headers come with the opening).
    """

    text: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    served_by: str = ""
    attempts: tuple[Attempt, ...] = ()
    parsed: Any = attrs.field(default=None, hash=False)
    rate_limit: RateLimitHint | None = None
    # The provider's id of the whole answer, on the last chunk of a stream whose wire says it (the Responses
    # API's: what a later call names as ``previous_response_id``).
    response_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types only; ``from_dict`` rebuilds an equal chunk."""
        return attrs.asdict(self, value_serializer=_plain_units)

    @classmethod
    def from_dict(cls, value: object) -> ChatChunk:
        """Rebuild from ``to_dict`` output; ``InvalidDataError`` names what is wrong."""
        data, where = serde.mapping(value, "chat_chunk"), "chat_chunk"
        usage = data.get("usage")
        return cls(
            text=serde.get(data, "text", str, where, default=""),
            finish_reason=serde.get(data, "finish_reason", str, where, default=None),
            usage=None if usage is None else Usage.from_dict(usage),
            tool_calls=tuple(ToolCall.from_dict(c) for c in serde.get(data, "tool_calls", list, where, default=[])),
            served_by=serde.get(data, "served_by", str, where, default=""),
            attempts=tuple(Attempt.from_dict(a) for a in serde.get(data, "attempts", list, where, default=[])),
            parsed=data.get("parsed"),
            rate_limit=_rate_limit(data),
            response_id=serde.get(data, "response_id", str, where, default=None),
        )


_TYPES: dict[str, Callable[[object], ProviderResponse]] = {
    cls.TYPE: cls.from_dict for cls in (CompletionResponse, VisionResponse, EmbeddingResponse)
}


def response_from_dict(value: object) -> ProviderResponse:
    """Rebuild a chat, vision, completion or embedding response from its ``to_dict`` output, choosing the
    class by ``type`` (``provmw.operations.any_response_from_dict`` also rebuilds the other operations')."""
    data = serde.mapping(value, "response")
    decode = _TYPES.get(data.get("type"))  # type: ignore[arg-type]
    if decode is None:
        raise InvalidDataError(f"response: unknown type {data.get('type')!r}")
    return decode(data)
