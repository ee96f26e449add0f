"""Shared circuit breakers: the core state machine (``provmw.stores.breakers``) as Lua scripts.

Failures seen by any process count in one window, so a breaker opens for all of them,
and its half-open probes are limited across all of them. Time is the Redis server's (the
middleware's monotonic clock means nothing on another host). Half-open probes that have
not reported ``probe_lease_s`` after probing began are presumed dead with their process,
and the breaker probes afresh.

While Redis is unreachable, each call is decided by this process's own breakers
(``MemoryBreakerStore``); an admission made locally carries a negative generation, so its
outcome goes back to the store that admitted it.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import attrs

from provmw.stores.breakers import Admission, BreakerPolicy, BreakerState, MemoryBreakerStore, Transition
from provmw_redis.backend import RedisUnavailableError

if TYPE_CHECKING:
    from provmw_redis.backend import RedisState

__all__ = ["RedisBreakerStore"]

_STATES = (BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN)
_IDLE_MS = 86_400_000  # a breaker nobody used for a day is forgotten (closed)


class RedisBreakerStore:
    """A ``BreakerStore`` shared through Redis, with this process's breakers as the fallback."""

    def __init__(self, state: RedisState) -> None:
        self._state = state
        self._prefix = f"{state.options.key_prefix}:breaker:"
        self._admit = state.script("breaker_admit", common="breaker_common")
        self._record = state.script("breaker_record", common="breaker_common")
        self._release = state.script("breaker_release")
        self.local = MemoryBreakerStore()

    async def admit(self, key: str, policy: BreakerPolicy, now: float) -> Admission:
        try:
            answer = await self._state.run(lambda: self._admit(keys=self._keys(key), args=[
                policy.open_s, policy.half_open_probes, _IDLE_MS, self._state.options.probe_lease_s]))
        except RedisUnavailableError:
            local = await self.local.admit(key, policy, now)
            return attrs.evolve(local, generation=-1 - local.generation)
        admitted, generation, probe, retry_after_s, before, after = answer
        transition = None if before == -1 else Transition(key, _STATES[before], _STATES[after])
        return Admission(bool(admitted), generation, bool(probe), float(retry_after_s), transition)

    async def record(self, key: str, admission: Admission, policy: BreakerPolicy, *,
                     failed: bool, slow: bool, now: float) -> Transition | None:
        if admission.generation < 0:
            return await self.local.record(key, _local(admission), policy, failed=failed, slow=slow, now=now)
        try:
            answer = await self._state.run(lambda: self._record(keys=self._keys(key), args=[
                admission.generation, int(failed), int(slow), policy.window_size, policy.min_calls,
                policy.failure_rate, policy.slow_call_rate, policy.half_open_probes, _IDLE_MS]))
        except RedisUnavailableError:
            return None  # the outcome is lost; the next calls go by this process's breaker
        return Transition(key, _STATES[answer[0]], _STATES[answer[1]]) if answer else None

    async def release(self, key: str, admission: Admission) -> None:
        if admission.generation < 0:
            await self.local.release(key, _local(admission))
            return
        if admission.probe:  # a permit lost to an outage is given up after probe_lease_s
            with contextlib.suppress(RedisUnavailableError):
                await self._state.run(lambda: self._release(keys=self._keys(key), args=[admission.generation]))

    def _keys(self, key: str) -> list[str]:
        tagged = f"{self._prefix}{{{key}}}"  # the window shares its breaker's slot
        return [tagged, tagged + ":w"]


def _local(admission: Admission) -> Admission:
    return attrs.evolve(admission, generation=-1 - admission.generation)
