"""Shared circuit breakers: the core state machine (``provmw.stores.breakers``) as Lua scripts.

Failures seen by any process count in one window, so a breaker opens for all of them,
and its half-open probes are limited across all of them. Time is the Redis server's (the
middleware's monotonic clock means nothing on another host). Half-open probes that have
not reported ``probe_lease_s`` after probing began are presumed dead with their process,
and the breaker probes afresh.

While Redis is unreachable, every method raises ``RedisUnavailableError``; the core's
outage rule (``provmw.stores.outage``) then lets this process's own breakers decide.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from provmw.stores.breakers import Admission, BreakerPolicy, BreakerState, Transition

if TYPE_CHECKING:
    from provmw_redis.backend import RedisState

__all__ = ["RedisBreakerStore"]

_STATES = (BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN)
_IDLE_MS = 86_400_000  # a breaker nobody used for a day is forgotten (closed)


class RedisBreakerStore:
    """A ``BreakerStore`` shared through Redis."""

    def __init__(self, state: RedisState) -> None:
        self._state = state
        self._prefix = f"{state.options.key_prefix}:breaker:"
        self._admit = state.script("breaker_admit", common="breaker_common")
        self._record = state.script("breaker_record", common="breaker_common")
        self._release = state.script("breaker_release")

    async def admit(self, key: str, policy: BreakerPolicy, now: float) -> Admission:
        answer = await self._state.run(lambda: self._admit(keys=self._keys(key), args=[
            policy.open_s, policy.half_open_probes, _IDLE_MS, self._state.options.probe_lease_s]))
        admitted, generation, probe, retry_after_s, before, after = answer
        transition = None if before == -1 else Transition(key, _STATES[before], _STATES[after])
        return Admission(bool(admitted), generation, bool(probe), float(retry_after_s), transition)

    async def record(self, key: str, admission: Admission, policy: BreakerPolicy, *,
                     failed: bool, slow: bool, now: float) -> Transition | None:
        answer = await self._state.run(lambda: self._record(keys=self._keys(key), args=[
            admission.generation, int(failed), int(slow), policy.window_size, policy.min_calls,
            policy.failure_rate, policy.slow_call_rate, policy.half_open_probes, _IDLE_MS]))
        return Transition(key, _STATES[answer[0]], _STATES[answer[1]]) if answer else None

    async def release(self, key: str, admission: Admission) -> None:
        if admission.probe:  # a permit lost to an outage is given up after probe_lease_s
            await self._state.run(lambda: self._release(keys=self._keys(key), args=[admission.generation]))

    async def state(self, key: str) -> BreakerState:
        """The breaker's state as stored (closed if never seen; an open one reads open until a call probes it)."""
        found = await self._state.run(lambda: self._state.client.hget(self._keys(key)[0], "s"))
        return _STATES[int(found or 0)]

    def _keys(self, key: str) -> list[str]:
        tagged = f"{self._prefix}{{{key}}}"  # the window shares its breaker's slot
        return [tagged, tagged + ":w"]

