"""Moderation: whether each text breaks a provider's content policy, by category (OpenAI ``/moderations``).

Free where the provider charges nothing (OpenAI's moderation models): no units, no output; the
input's UTF-8 bytes still bound its tokens, for the limits that count them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from provmw._base import serde
from provmw._base.strict_json import plain_json
from provmw.context import FrozenMap
from provmw.errors import ConfigurationError
from provmw.responses import ProviderResponse

__all__ = ["ModerationRequest", "ModerationResponse", "ModerationResult"]

_NO_UNITS: Mapping[str, float] = MappingProxyType({})


def _frozen(value: Mapping[str, Any] | None) -> FrozenMap:
    return value if isinstance(value, FrozenMap) else FrozenMap(value)


def _inputs(value: str | Iterable[str]) -> tuple[str, ...]:
    """One text, or several in order."""
    if isinstance(value, str):
        value = (value,)
    elif isinstance(value, bytes | Mapping) or not isinstance(value, Iterable):
        raise ConfigurationError(f"inputs must be a string or a list of strings, got {type(value).__name__}")
    inputs = tuple(value)
    if not inputs:
        raise ConfigurationError("inputs must hold at least one string")
    for i, text in enumerate(inputs):
        if not isinstance(text, str) or not text:
            raise ConfigurationError(f"inputs[{i}] must be a non-empty string, got {text!r:.40}")
    return inputs


@attrs.frozen
class ModerationRequest:
    """The texts to classify, in order."""

    inputs: tuple[str, ...] = attrs.field(converter=_inputs)
    options: FrozenMap = attrs.field(factory=FrozenMap, converter=_frozen)

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": list(self.inputs), "options": plain_json(self.options)}

    def needs(self, *, streaming: bool) -> frozenset[str]:
        return frozenset({"moderation"})

    def input_bytes(self) -> int:
        return sum(len(text.encode("utf-8")) for text in self.inputs)

    def estimate_tokens(self) -> int:
        return sum(len(text) for text in self.inputs) // 4 + 1

    def most_output_tokens(self, options: Mapping[str, Any]) -> int | None:
        return 0

    def most_units(self, options: Mapping[str, Any]) -> Mapping[str, float]:
        return _NO_UNITS

    def deterministic(self, options: Mapping[str, Any]) -> bool:
        return True

    def texts(self) -> tuple[str, ...]:
        return self.inputs

    def with_texts(self, texts: Sequence[str]) -> ModerationRequest:
        """The same request with each input replaced, in order."""
        if len(texts) != len(self.inputs):
            raise ConfigurationError(f"with_texts: expected {len(self.inputs)} texts, got {len(texts)}")
        return attrs.evolve(self, inputs=tuple(texts))


def _flag(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigurationError(f"flagged must be a bool, got {value!r:.40}")


def _flags(value: Mapping[str, bool]) -> Mapping[str, bool]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"categories must be a mapping of name to bool, got {type(value).__name__}")
    for name, flagged in value.items():
        if not isinstance(name, str) or not isinstance(flagged, bool):
            raise ConfigurationError(f"categories.{name}: expected a bool, got {flagged!r:.40}")
    return MappingProxyType(dict(value))


def _scores(value: Mapping[str, float]) -> Mapping[str, float]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"scores must be a mapping of name to number, got {type(value).__name__}")
    for name, score in value.items():
        if not isinstance(name, str) or isinstance(score, bool) or not isinstance(score, int | float) \
                or not math.isfinite(score):
            raise ConfigurationError(f"scores.{name}: expected a finite number, got {score!r:.40}")
    return MappingProxyType({name: float(score) for name, score in value.items()})


@attrs.frozen(kw_only=True)
class ModerationResult:
    """One input's verdict: flagged or not, each category's flag, and each category's score."""

    flagged: bool = attrs.field(validator=_flag)
    categories: Mapping[str, bool] = attrs.field(factory=dict, converter=_flags, hash=False)
    scores: Mapping[str, float] = attrs.field(factory=dict, converter=_scores, hash=False)

    @property
    def flagged_categories(self) -> tuple[str, ...]:
        """The categories flagged, in the provider's order."""
        return tuple(name for name, flagged in self.categories.items() if flagged)

    @classmethod
    def from_dict(cls, value: object, where: str = "result") -> ModerationResult:
        data = serde.mapping(value, where)
        return cls(flagged=serde.get(data, "flagged", bool, where),
                   categories=serde.get(data, "categories", dict, where, default={}),
                   scores=serde.get(data, "scores", dict, where, default={}))


def _results(value: Iterable[ModerationResult]) -> tuple[ModerationResult, ...]:
    results = tuple(value)
    if not all(isinstance(r, ModerationResult) for r in results):
        raise ConfigurationError("results must be ModerationResults")
    return results


@attrs.frozen(kw_only=True)
class ModerationResponse(ProviderResponse):
    """One result per input, in input order."""

    TYPE = "moderation"

    results: tuple[ModerationResult, ...] = attrs.field(default=(), converter=_results)

    @property
    def flagged(self) -> bool:
        """Whether any input was flagged."""
        return any(r.flagged for r in self.results)

    @classmethod
    def _fields_from(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        rows = serde.get(data, "results", list, cls.TYPE)
        results = tuple(ModerationResult.from_dict(row, f"moderation.results[{i}]") for i, row in enumerate(rows))
        return {**super()._fields_from(data), "results": results}
