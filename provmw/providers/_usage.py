"""Reading a provider's usage body: every count checked once, in one place (ADR 0015).

Adapters normalise usage to one meaning (``input_tokens`` counts every input token, cache
reads and writes included; ``output_tokens`` every output token, reasoning included) and
read each count through :class:`UsageBody`, so a negative, fractional, boolean, textual or
absurd count, or a part larger than its whole, is a ``MalformedResponseError`` naming the
field, never a price. Retry and fallback already treat that error as a bad answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from provmw.errors import MalformedResponseError
from provmw.responses import Usage

__all__ = ["MAX_TOKEN_COUNT", "UsageBody"]

# No call comes near 2**40 (about 1.1e12) tokens: the largest context windows are near 2**24.
# Below it, the sum of every count of a call stays far inside SQLite's and PostgreSQL's
# 64-bit integers, and its cost in micro-USD at any listed rate (2**40 tokens at $75 per
# million is 8.2e13 micro-USD) fits a budget store's 64-bit counters: a server's absurd
# figure is rejected here instead of overflowing a store later.
MAX_TOKEN_COUNT = 2**40


@attrs.frozen
class UsageBody:
    """One usage object of a provider's answer, read field by field with every count checked."""

    body: Mapping[str, Any]
    provider: str
    model: str
    where: str = "usage"

    @classmethod
    def of(cls, value: object, *, provider: str, model: str, where: str = "usage") -> UsageBody:
        """The usage object ``value``; absent (None) reads as all zeros, anything but an object is malformed."""
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise _malformed(f"{where} must be an object, got {type(value).__name__}", provider, model)
        return cls(value, provider, model, where)

    def count(self, *path: str) -> int:
        """The count at ``path`` (absent or null is 0): a non-negative int below ``MAX_TOKEN_COUNT``."""
        value: Any = self.body
        for i, key in enumerate(path):
            if value is None:
                return 0
            if type(value) is not dict and not isinstance(value, Mapping):  # a decoded answer holds dicts
                raise self._error(".".join(path[:i]), "must be an object", value)
            value = value.get(key)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_TOKEN_COUNT:
            raise self._error(".".join(path), "must be an integer from 0 to 2**40", value)
        return value

    def has(self, *path: str) -> bool:
        """Whether the body carries a (non-null) value at ``path``."""
        value: Any = self.body
        for key in path:
            if not isinstance(value, Mapping):
                return False
            value = value.get(key)
        return value is not None

    def usage(self, **counts: int) -> Usage:
        """A ``Usage`` of ``counts``, once its parts are known to fit their wholes."""
        usage = Usage(**counts)  # type: ignore[arg-type]  # counts only: units are not passed here
        cache = usage.cached_input_tokens + usage.cache_write_5m_tokens + usage.cache_write_1h_tokens
        if cache > usage.input_tokens:
            raise _malformed(f"{self.where}: cache reads and writes ({cache}) exceed the input tokens "
                             f"({usage.input_tokens})", self.provider, self.model)
        if usage.reasoning_tokens > usage.output_tokens:
            raise _malformed(f"{self.where}: reasoning tokens ({usage.reasoning_tokens}) exceed the output "
                             f"tokens ({usage.output_tokens})", self.provider, self.model)
        return usage

    def _error(self, field: str, wanted: str, value: Any) -> MalformedResponseError:
        return _malformed(f"{self.where}.{field} {wanted}, got {value!r:.40}", self.provider, self.model)


def _malformed(message: str, provider: str, model: str) -> MalformedResponseError:
    return MalformedResponseError(message, provider=provider, model=model)
