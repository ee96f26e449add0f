"""Rate limit state: the limits, the limiter interface, and the in-memory limiter.

Requests and tokens per minute are token buckets that refill continuously (a full
minute's worth at most); concurrency is a count of calls in flight. ``acquire`` takes all
three at once or none, and says how long to wait when it cannot. A grant carries a
``permit`` that ``release`` hands back, so a shared limiter can tell whose slot ends.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from provmw._base.bounded import MAX_NAMES, KeepingLRU
from provmw.options import number

__all__ = ["Grant", "MemoryRateLimiter", "RateLimiter", "RateLimits"]

_optional_count = number(ge=1, integer=True, optional=True)


@attrs.frozen
class RateLimits:
    """The limits of one configuration; ``None`` means unlimited."""

    requests_per_minute: int | None = attrs.field(default=None, validator=_optional_count)
    tokens_per_minute: int | None = attrs.field(default=None, validator=_optional_count)
    max_concurrency: int | None = attrs.field(default=None, validator=_optional_count)


@attrs.frozen
class Grant:
    """``admitted`` with a ``permit`` to release, or the ``limit`` that refused and the ``wait_s``
    before it may admit."""

    admitted: bool
    limit: str | None = None
    wait_s: float = 0.0
    permit: str = ""


class RateLimiter(Protocol):
    """Where rate limit state lives; both methods are atomic for ``key``."""

    async def acquire(self, key: str, limits: RateLimits, tokens: int, now: float) -> Grant:
        """Take one request, ``tokens`` tokens and a concurrency slot, or none of them."""
        ...

    async def release(self, key: str, limits: RateLimits, *, permit: str, reserved: int, used: int,
                      now: float) -> None:
        """Free the ``permit``'s slot and correct the token estimate ``reserved`` to what was ``used``."""
        ...


@attrs.define
class _Bucket:
    per_minute: int
    level: float
    updated: float

    def refill(self, now: float) -> None:
        rate = self.per_minute / 60.0
        self.level = min(float(self.per_minute), self.level + (now - self.updated) * rate)
        self.updated = now

    def wait_for(self, amount: float) -> float:
        return max(0.0, (amount - self.level) * 60.0 / self.per_minute)


@attrs.define
class _State:
    requests: _Bucket | None
    tokens: _Bucket | None
    in_flight: int = 0


class MemoryRateLimiter:
    """Rate limits in this process; a concurrency wait is polled every ``poll_s``.

    At most ``max_keys`` configurations are tracked (a ``"*"`` limit applies to each ad-hoc
    one). A full limiter forgets the least recently used one with no call in flight: it
    comes back with full buckets, as a configuration never seen would.
    """

    def __init__(self, poll_s: float = 0.02, max_keys: int = MAX_NAMES) -> None:
        self.poll_s = poll_s
        self._states: KeepingLRU[str, _State] = KeepingLRU(max_keys, keep=lambda s: s.in_flight > 0)

    async def acquire(self, key: str, limits: RateLimits, tokens: int, now: float) -> Grant:
        s = self._state(key, limits, now)
        if limits.max_concurrency is not None and s.in_flight >= limits.max_concurrency:
            return Grant(False, "max_concurrency", self.poll_s)
        for name, bucket, amount in (("requests_per_minute", s.requests, 1),
                                     ("tokens_per_minute", s.tokens, tokens)):
            if bucket is not None:
                bucket.refill(now)
                # A call larger than a whole minute's tokens may go once the bucket is full.
                wait = bucket.wait_for(min(amount, bucket.per_minute))
                if wait > 0:
                    return Grant(False, name, wait)
        if s.requests is not None:
            s.requests.level -= 1
        if s.tokens is not None:
            s.tokens.level -= tokens
        s.in_flight += 1
        return Grant(True)

    async def release(self, key: str, limits: RateLimits, *, permit: str, reserved: int, used: int,
                      now: float) -> None:
        s = self._states.get(key)
        if s is None:
            return
        s.in_flight = max(0, s.in_flight - 1)
        if s.tokens is not None:
            s.tokens.refill(now)
            s.tokens.level = min(float(s.tokens.per_minute), s.tokens.level + reserved - used)

    def _state(self, key: str, limits: RateLimits, now: float) -> _State:
        s = self._states.used(key)
        if s is None:
            s = self._states[key] = _State(_bucket(limits.requests_per_minute, now),
                                           _bucket(limits.tokens_per_minute, now))
        return s


def _bucket(per_minute: int | None, now: float) -> _Bucket | None:
    return None if per_minute is None else _Bucket(per_minute, float(per_minute), now)
