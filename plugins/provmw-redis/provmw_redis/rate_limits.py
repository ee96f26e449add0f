"""Shared rate limits: requests and tokens per minute and concurrency, counted across processes.

The buckets refill continuously by the Redis server's clock, as the core limiter's do by
this process's. A concurrency slot is a permit with a lease (``slot_lease_s``), so a
process that dies holding one frees it when the lease runs out. While Redis is
unreachable, every method raises ``RedisUnavailableError``; the core's outage rule
(``provmw.stores.outage``) then lets this process's own limiter decide.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import attrs

from provmw.stores.rate_limits import Grant, RateLimits
from provmw_redis.backend import lua_limits

if TYPE_CHECKING:
    from provmw_redis.backend import RedisState

__all__ = ["RedisRateLimiter"]

class RedisRateLimiter:
    """A ``RateLimiter`` shared through Redis; a concurrency wait is polled every ``poll_s``."""

    def __init__(self, state: RedisState, poll_s: float = 0.02) -> None:
        self._state = state
        self._prefix = f"{state.options.key_prefix}:rate:"
        self._acquire = state.script("rate_acquire")
        self._release = state.script("rate_release")
        self.poll_s = poll_s

    async def acquire(self, key: str, limits: RateLimits, tokens: int, now: float) -> Grant:
        permit = uuid.uuid4().hex
        args: list[str | int | float] = [*lua_limits(attrs.astuple(limits)), tokens, permit,
                self._state.options.slot_lease_s, self.poll_s]
        answer = await self._state.run(lambda: self._acquire(keys=self._keys(key), args=args))
        if answer[0] == 1:
            return Grant(True, permit=permit)
        return Grant(False, answer[1].decode(), float(answer[2]))

    async def release(self, key: str, limits: RateLimits, *, permit: str, reserved: int, used: int,
                      now: float) -> None:
        [tpm] = lua_limits([limits.tokens_per_minute])
        await self._state.run(lambda: self._release(keys=self._keys(key), args=[tpm, permit, reserved, used]))

    def _keys(self, key: str) -> list[str]:
        tagged = f"{self._prefix}{{{key}}}"
        return [tagged, tagged + ":slots"]
