"""Shared pool state: a fleet's calls in flight, latency, minute counts, cool-downs and affinity.

The same contract and semantics as the core's ``MemoryPoolState`` (ADR 0051), one round trip
(a Lua script) for each of ``read``, ``started`` and ``ended``; the choice between a read and
its start is made by the pool layer, in this process. Every key of a pool carries the pool's
name as its hash tag, so one script reaches all of a pool's keys on a cluster too::

    <prefix>:pool:{<pool>}:m:<member>            hash: latency average, when measured, cool-down end
    <prefix>:pool:{<pool>}:f:<member>            sorted set: calls in flight -> lease expiry
    <prefix>:pool:{<pool>}:u:<member>            sorted set: "<call>|<tokens>" -> when it started (a rolling minute)
    <prefix>:pool:{<pool>}:k:<affinity key>      string: "<expires>|<member>"

Times are the callers' wall clocks (``now``), as in every process of a fleet; each key also
expires by itself once nothing in it can matter (plus :data:`SKEW_S`, for hosts whose clocks
disagree), so nothing is left behind forever.

**Calls in flight are leases.** Each start adds the call, under a name of its own, with an
expiry ``slot_lease_s`` ahead (the rate limits' concurrency slots use the same lease); its end
removes it. A process killed mid-call leaves entries that stop counting when their lease runs
out, so the counts cannot drift. The cost: a call still running after its lease no longer
counts as in flight. Each process remembers the names of its own calls in flight; an end
removes the newest on that member (calls on one member are interchangeable for the count).

**A burst spreads.** Between a read and the start it leads to, the store is a round trip
away, so many concurrent calls of one process would read the same counts and all take the
member that was least busy. A read therefore adds this process's own starts (less its ends)
sent while the read was on its way: each call of the burst sees the choices made before it.

While Redis is unreachable every method raises ``RedisUnavailableError``; the core's outage
rule (``provmw.stores.outage``) then lets this process's own view of the pools decide.
"""

from __future__ import annotations

import collections
import itertools
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from provmw.stores.pools import LATENCY_ALPHA, LATENCY_STALE_S, WINDOW_S, Load, PoolView
from provmw_redis.backend import milliseconds

if TYPE_CHECKING:
    from provmw_redis.backend import RedisState

__all__ = ["SKEW_S", "RedisPoolState"]

SKEW_S = 60.0  # each key outlives its last use by this much: clocks of a fleet's hosts may disagree
_FIELDS = 6  # what pool_read returns per member


class RedisPoolState:
    """A ``PoolState`` shared through Redis; in-flight calls are leases of ``slot_lease_s``."""

    def __init__(self, state: RedisState) -> None:
        self._state = state
        self._prefix = f"{state.options.key_prefix}:pool:"
        self._lease_s = state.options.slot_lease_s
        self._read = state.script("pool_read")
        self._started = state.script("pool_started")
        self._ended = state.script("pool_ended")
        self._process = uuid.uuid4().hex
        self._calls = itertools.count()
        self._mine: dict[tuple[str, str], list[str]] = {}  # this process's calls in flight, by name
        self._sent: collections.Counter[tuple[str, str]] = collections.Counter()  # starts less ends sent

    async def read(self, pool: str, members: Sequence[str], key: str | None, now: float) -> PoolView:
        keys = [name for member in members for name in self._member_keys(pool, member, now)]
        if key is not None:
            keys.append(self._affinity_key(pool, key))
        before = [self._sent[(pool, m)] for m in members]
        answer = await self._state.run(lambda: self._read(keys=keys, args=[repr(now), len(members), repr(WINDOW_S)]))
        loads = {m: _load(answer[i * _FIELDS:(i + 1) * _FIELDS], self._sent[(pool, m)] - before[i], now)
                 for i, m in enumerate(members)}
        return PoolView(loads, None if key is None else _affine(answer[len(members) * _FIELDS], now))

    async def started(self, pool: str, member: str, *, key: str | None, tokens: int, now: float,
                      key_ttl_s: float) -> None:
        call = f"{self._process}:{next(self._calls)}"
        self._mine.setdefault((pool, member), []).append(call)  # before the round trip: it may land and fail
        self._sent[(pool, member)] += 1
        keys = [self._in_flight_key(pool, member), self._use_key(pool, member)]
        args: list[str | int] = [repr(now), call, repr(now + self._lease_s), max(int(tokens), 0),
                                 milliseconds(WINDOW_S + SKEW_S), milliseconds(self._lease_s + SKEW_S)]
        if key is not None:
            keys.append(self._affinity_key(pool, key))
            args += [f"{now + key_ttl_s!r}|{member}", milliseconds(key_ttl_s + SKEW_S)]
        args.append(repr(WINDOW_S))
        await self._state.run(lambda: self._started(keys=keys, args=args))

    async def ended(self, pool: str, member: str, *, now: float, latency_s: float | None,
                    cooldown_until: float | None) -> None:
        call = self._forget_newest(pool, member)
        self._sent[(pool, member)] -= 1
        kept_s = max(LATENCY_STALE_S, 0.0 if cooldown_until is None else cooldown_until - now) + SKEW_S
        args: list[str | int] = [repr(now), call, _number(latency_s), _number(cooldown_until), repr(LATENCY_ALPHA),
                                 repr(LATENCY_STALE_S), milliseconds(kept_s)]
        keys = [self._member_key(pool, member), self._in_flight_key(pool, member)]
        await self._state.run(lambda: self._ended(keys=keys, args=args))

    async def aclose(self) -> None:
        """Forget this process's calls; those still in Redis end with their lease. The client is
        the backend's, closed with it."""
        self._mine.clear()
        self._sent.clear()

    def _forget_newest(self, pool: str, member: str) -> str:
        calls = self._mine.get((pool, member))
        if not calls:  # no start of this process's on record (an end without one, or after aclose)
            return ""
        call = calls.pop()
        if not calls:
            del self._mine[(pool, member)]
        return call

    def _member_keys(self, pool: str, member: str, now: float) -> tuple[str, str, str]:
        return self._member_key(pool, member), self._in_flight_key(pool, member), self._use_key(pool, member)

    def _tag(self, pool: str) -> str:
        return f"{self._prefix}{{{pool}}}:"

    def _member_key(self, pool: str, member: str) -> str:
        return f"{self._tag(pool)}m:{member}"

    def _in_flight_key(self, pool: str, member: str) -> str:
        return f"{self._tag(pool)}f:{member}"

    def _use_key(self, pool: str, member: str) -> str:
        return f"{self._tag(pool)}u:{member}"

    def _affinity_key(self, pool: str, key: str) -> str:
        return f"{self._tag(pool)}k:{key}"


def _load(fields: Sequence[bytes | int | None], own_since_read: int, now: float) -> Load:
    in_flight, latency, measured_at, cooldown, requests, tokens = fields
    average = None
    if latency is not None and measured_at is not None and now - float(measured_at) < LATENCY_STALE_S:
        average = float(latency)
    return Load(max(int(in_flight or 0) + own_since_read, 0), average, int(requests or 0), int(tokens or 0),
                float(cooldown or 0.0))


def _affine(value: bytes | None, now: float) -> str | None:
    if value is None:
        return None
    expires, _, member = value.decode().partition("|")
    return member if float(expires) > now else None


def _number(value: float | None) -> str:
    return "" if value is None else repr(float(value))
