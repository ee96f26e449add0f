"""Shared rate limits: requests and tokens per minute and concurrency, counted across processes.

The buckets refill continuously by the Redis server's clock, as the core limiter's do by
this process's. A concurrency slot is a permit with a lease (``slot_lease_s``), so a
process that dies holding one frees it when the lease runs out. While Redis is
unreachable, this process's own limiter (``MemoryRateLimiter``) decides; its permits are
marked so that each is released where it was taken.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import TYPE_CHECKING

import attrs

from provmw.stores.rate_limits import Grant, MemoryRateLimiter, RateLimits
from provmw_redis.backend import RedisUnavailableError, lua_limits

if TYPE_CHECKING:
    from provmw_redis.backend import RedisState

__all__ = ["RedisRateLimiter"]

_LOCAL = "local"


class RedisRateLimiter:
    """A ``RateLimiter`` shared through Redis, with this process's limiter as the fallback."""

    def __init__(self, state: RedisState) -> None:
        self._state = state
        self._prefix = f"{state.options.key_prefix}:rate:"
        self._acquire = state.script("rate_acquire")
        self._release = state.script("rate_release")
        self.local = MemoryRateLimiter()

    async def acquire(self, key: str, limits: RateLimits, tokens: int, now: float) -> Grant:
        permit = uuid.uuid4().hex
        args: list[str | int | float] = [*lua_limits(attrs.astuple(limits)), tokens, permit,
                self._state.options.slot_lease_s, self.local.poll_s]
        try:
            answer = await self._state.run(lambda: self._acquire(keys=self._keys(key), args=args))
        except RedisUnavailableError:
            return attrs.evolve(await self.local.acquire(key, limits, tokens, now), permit=_LOCAL)
        if answer[0] == 1:
            return Grant(True, permit=permit)
        return Grant(False, answer[1].decode(), float(answer[2]))

    async def release(self, key: str, limits: RateLimits, *, permit: str, reserved: int, used: int,
                      now: float) -> None:
        if permit == _LOCAL:
            await self.local.release(key, limits, permit=permit, reserved=reserved, used=used, now=now)
            return
        [tpm] = lua_limits([limits.tokens_per_minute])
        with contextlib.suppress(RedisUnavailableError):  # the slot's lease frees it
            await self._state.run(lambda: self._release(keys=self._keys(key), args=[tpm, permit, reserved, used]))

    def _keys(self, key: str) -> list[str]:
        tagged = f"{self._prefix}{{{key}}}"
        return [tagged, tagged + ":slots"]
