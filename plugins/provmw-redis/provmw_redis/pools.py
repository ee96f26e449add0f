"""Shared pool state: a fleet's calls in flight, latency, minute counts, cool-downs and affinity.

The same contract and semantics as the core's ``MemoryPoolState`` (ADR 0051); the choice
between a read and its start is made by the pool layer, in this process. Every key of a pool
carries the pool's name as its hash tag, so one script reaches all of a pool's keys on a
cluster too::

    <prefix>:pool:{<pool>}:m:<member>            hash: latency average, when measured, cool-down end
    <prefix>:pool:{<pool>}:f:<member>            sorted set: calls in flight -> lease expiry
    <prefix>:pool:{<pool>}:u:<member>            sorted set: "<call>|<tokens>" -> when it started (a rolling minute)
    <prefix>:pool:{<pool>}:k:<affinity key>      string: "<expires>|<member>"
    <prefix>:pool:{<pool>}:w:<process>           string: the number of the process's last write landed

Times are the callers' wall clocks (``now``), as in every process of a fleet; each key also
expires by itself once nothing in it can matter (plus :data:`SKEW_S`, for hosts whose clocks
disagree), so nothing is left behind forever.

**A call waits for one round trip: its read.** ``started`` and ``ended`` return at once; the
write goes out behind the call, through one ordered writer per ``RedisPoolState`` that sends
whatever is waiting (at most :data:`BATCH` writes) as one pipeline, one pipeline at a time. So
a call's end never reaches Redis before its start, and a burst of starts and ends costs a few
round trips, not one each. What that means for readers: a start or an end is in Redis a round
trip or two after the call made it (typically long before the provider answers), so another
process, or an affinity key's next call, sees it then; :meth:`RedisPoolState.flush` waits for
everything sent so far, and ``aclose`` flushes (for at most ``max(1 s, 4 x timeout_s)``), so a
manager that closes leaves Redis consistent. A write that fails on its way is given up, never
raised into a call: an unreachable Redis is the backend's outage (logged once), any other error
is logged here; what a lost start or end leaves behind ends with its lease or TTL.

**Calls in flight are leases.** Each start adds the call, under a name of its own, with an
expiry ``slot_lease_s`` ahead (the rate limits' concurrency slots use the same lease); its end
removes it. A process killed mid-call leaves entries that stop counting when their lease runs
out, so the counts cannot drift. The cost: a call still running after its lease no longer
counts as in flight. Each process remembers the names of its own calls in flight; an end
removes the newest on that member (calls on one member are interchangeable for the count).

**A burst spreads, exactly.** Between a read and the start it leads to, the store is a round
trip away, so many concurrent calls of one process would read the same counts and all take the
member that was least busy. Each write carries a number, increasing in the order this process
made them, and lands the pool's ``w:<process>`` key with it; a read returns that key, so it
knows exactly which of this process's own starts and ends it saw, and adds the others (still on
their way, or made while the read was) to the calls in flight, and the starts to the minute's
requests and tokens: each call of the burst sees the choices made before it, its rate limits
included, and nothing is counted twice.

While Redis is unreachable ``read`` raises ``RedisUnavailableError``, and so do ``started`` and
``ended`` once a read or a write has found it so, until a read answers again (a write then would
only be lost); the core's outage rule (``provmw.stores.outage``) then lets this process's own
view of the pools decide, and logs the outage once.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import redis.exceptions

from provmw.stores.pools import LATENCY_ALPHA, LATENCY_STALE_S, WINDOW_S, Load, PoolView
from provmw_redis.backend import RedisUnavailableError, milliseconds

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

    from provmw_redis.backend import RedisState

__all__ = ["BATCH", "SKEW_S", "RedisPoolState"]

log = logging.getLogger(__name__)

SKEW_S = 60.0  # each key outlives its last use by this much: clocks of a fleet's hosts may disagree
BATCH = 256  # starts and ends sent in one pipeline at most
_FIELDS = 6  # what pool_read returns per member


@attrs.frozen
class _Unseen:
    """What this process's own writes add to a member's load while Redis has not seen them."""

    in_flight: int
    requests: int = 0
    tokens: int = 0


@attrs.frozen
class _Write:
    """A start or an end on its way to Redis; ``unseen`` is what a read that misses it must add."""

    number: int
    pool: str
    member: str
    unseen: _Unseen | None
    script: str
    keys: tuple[str, ...]
    args: tuple[str | int, ...]


class RedisPoolState:
    """A ``PoolState`` shared through Redis; in-flight calls are leases of ``slot_lease_s``; starts
    and ends are written behind the call, in order."""

    def __init__(self, state: RedisState) -> None:
        self._state = state
        self._prefix = f"{state.options.key_prefix}:pool:"
        self._lease_s = state.options.slot_lease_s
        self._close_s = max(1.0, 4 * state.options.timeout_s)
        self._read = state.script("pool_read")
        self._scripts: dict[str, AsyncScript] = {name: state.script(name) for name in ("pool_started", "pool_ended")}
        self._process = uuid.uuid4().hex
        self._calls = itertools.count()
        self._numbers = itertools.count(1)
        self._mine: dict[tuple[str, str], list[str]] = {}  # this process's calls in flight, by name
        # This process's starts and ends, by number, until every read that could miss them is over.
        self._own: dict[tuple[str, str], dict[int, _Unseen]] = {}
        self._written = 0  # every write numbered up to this one has landed or been given up
        self._reading: collections.Counter[int] = collections.Counter()  # reads on their way, by _written then
        self._waiting: collections.deque[_Write] = collections.deque()
        self._writer: asyncio.Task[None] | None = None
        self._loaded = False  # whether this writer has loaded its scripts into the server
        self._down = False  # Redis failed a read or a write, and no read has answered since

    async def read(self, pool: str, members: Sequence[str], key: str | None, now: float) -> PoolView:
        keys = [name for member in members for name in self._member_keys(pool, member)]
        keys.append(self._landed_key(pool))
        if key is not None:
            keys.append(self._affinity_key(pool, key))
        written = self._written
        self._reading[written] += 1
        try:
            answer = await self._state.run(lambda: self._read(keys=keys, args=[repr(now), len(members),
                                                                                repr(WINDOW_S)]))
        except RedisUnavailableError:
            self._down = True
            raise
        else:
            self._down = False
        finally:
            self._reading[written] -= 1
            if not self._reading[written]:
                del self._reading[written]
        landed = int(answer[len(members) * _FIELDS] or 0)
        loads = {m: _load(answer[i * _FIELDS:(i + 1) * _FIELDS], self._unseen(pool, m, landed), now)
                 for i, m in enumerate(members)}
        return PoolView(loads, None if key is None else _affine(answer[len(members) * _FIELDS + 1], now))

    async def started(self, pool: str, member: str, *, key: str | None, tokens: int, now: float,
                      key_ttl_s: float) -> None:
        """Counted at once by this process's reads; in Redis a round trip or two later."""
        self._refuse_while_down()
        call = f"{self._process}:{next(self._calls)}"
        self._mine.setdefault((pool, member), []).append(call)
        number = next(self._numbers)
        keys = [self._in_flight_key(pool, member), self._use_key(pool, member), self._landed_key(pool)]
        args: list[str | int] = [repr(now), call, repr(now + self._lease_s), max(int(tokens), 0),
                                 milliseconds(WINDOW_S + SKEW_S), milliseconds(self._lease_s + SKEW_S),
                                 number, milliseconds(self._lease_s + SKEW_S)]
        if key is not None:
            keys.append(self._affinity_key(pool, key))
            args += [f"{now + key_ttl_s!r}|{member}", milliseconds(key_ttl_s + SKEW_S)]
        args.append(repr(WINDOW_S))
        self._send(_Write(number, pool, member, _Unseen(1, 1, max(int(tokens), 0)), "pool_started", tuple(keys),
                          tuple(args)))

    async def ended(self, pool: str, member: str, *, now: float, latency_s: float | None,
                    cooldown_until: float | None) -> None:
        """Counted at once by this process's reads; in Redis after its start, a round trip or two later."""
        call = self._forget_newest(pool, member)
        self._refuse_while_down()
        number = next(self._numbers)
        kept_s = max(LATENCY_STALE_S, 0.0 if cooldown_until is None else cooldown_until - now) + SKEW_S
        args = (repr(now), call, _number(latency_s), _number(cooldown_until), repr(LATENCY_ALPHA),
                repr(LATENCY_STALE_S), milliseconds(kept_s), number, milliseconds(self._lease_s + SKEW_S))
        keys = (self._member_key(pool, member), self._in_flight_key(pool, member), self._landed_key(pool))
        self._send(_Write(number, pool, member, _Unseen(-1) if call else None, "pool_ended", keys, args))

    async def flush(self) -> None:
        """Wait until every start and end made so far (and any made meanwhile) has landed in Redis or
        been given up: what tests and ``aclose`` use to see Redis settled."""
        while self._writer is not None and not self._writer.done():
            await asyncio.wait({self._writer})

    async def aclose(self) -> None:
        """Flush (for at most ``max(1 s, 4 x timeout_s)``), then forget this process's calls; those
        still in Redis end with their lease. The client is the backend's, closed with it."""
        try:
            await asyncio.wait_for(self.flush(), self._close_s)
        except TimeoutError:
            log.warning("pool: the starts and ends still on their way were not written to Redis in %gs; given "
                        "up (their leases and TTLs end them)", self._close_s)
            if self._writer is not None:
                self._writer.cancel()
        self._waiting.clear()
        self._mine.clear()
        self._own.clear()

    def _refuse_while_down(self) -> None:
        """While Redis is known to be down a write would be lost: refused at once, so the outage guard
        keeps counting one outage (a start that "succeeded" would read as Redis answering again)."""
        if self._down:
            raise RedisUnavailableError("redis state unreachable lately: pool starts and ends wait for a read "
                                        "to answer")

    def _send(self, write: _Write) -> None:
        if write.unseen is not None:
            self._own.setdefault((write.pool, write.member), {})[write.number] = write.unseen
        self._waiting.append(write)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_all(), name="provmw-redis pool writer")

    async def _write_all(self) -> None:
        """The one writer: what is waiting goes out as one pipeline, then what came meanwhile."""
        while self._waiting:
            batch = [self._waiting.popleft() for _ in range(min(len(self._waiting), BATCH))]
            try:
                lost = await self._state.run(functools.partial(self._pipelined, batch))
            except RedisUnavailableError:  # the backend's outage, logged there once
                self._down = True
                lost = batch
            except Exception as exc:
                log.warning("pool: %d starts and ends could not be written to Redis (%s: %s)", len(batch),
                            type(exc).__name__, exc)
                lost = batch
            self._written = batch[-1].number
            self._forget(batch, lost)

    async def _pipelined(self, batch: list[_Write]) -> list[_Write]:
        """Send ``batch`` in order; the writes that failed (logged)."""
        if not self._loaded:
            await self._load_scripts()
        answers = await self._execute(batch)
        if all(isinstance(a, redis.exceptions.NoScriptError) for a in answers):  # a restarted server
            await self._load_scripts()
            answers = await self._execute(batch)  # none landed: sent again in the same order
        lost = [w for w, a in zip(batch, answers, strict=True) if isinstance(a, Exception)]
        if lost:
            first = next(a for a in answers if isinstance(a, Exception))
            log.warning("pool: %d of %d starts and ends failed in Redis (%s: %s)", len(lost), len(batch),
                        type(first).__name__, first)
            self._loaded = self._loaded and not isinstance(first, redis.exceptions.NoScriptError)
        return lost

    async def _execute(self, batch: list[_Write]) -> list[object]:
        # EVALSHA queued by hand: a pipeline given the scripts would ask SCRIPT EXISTS first, each time.
        pipe = self._state.client.pipeline(transaction=False)
        for write in batch:
            pipe.evalsha(self._scripts[write.script].sha, len(write.keys), *write.keys, *write.args)
        return list(await pipe.execute(raise_on_error=False))

    async def _load_scripts(self) -> None:
        for script in self._scripts.values():
            script.sha = await self._state.client.script_load(script.script)
        self._loaded = True

    def _forget(self, batch: list[_Write], lost: list[_Write]) -> None:
        """Drop the written starts and ends no read on its way can miss any more, and the lost ones."""
        for write in lost:
            self._own.get((write.pool, write.member), {}).pop(write.number, None)
        seen = min(self._reading, default=self._written)
        for pool_member in {(w.pool, w.member) for w in batch}:
            own = self._own.get(pool_member)
            while own and next(iter(own)) <= seen:
                del own[next(iter(own))]
            if own is not None and not own:
                del self._own[pool_member]

    def _unseen(self, pool: str, member: str, landed: int) -> _Unseen:
        """This process's starts and ends on ``member`` that a read which saw ``landed`` missed."""
        missed = [unseen for number, unseen in self._own.get((pool, member), {}).items() if number > landed]
        return _Unseen(sum(u.in_flight for u in missed), sum(u.requests for u in missed),
                       sum(u.tokens for u in missed))

    def _forget_newest(self, pool: str, member: str) -> str:
        calls = self._mine.get((pool, member))
        if not calls:  # no start of this process's on record (an end without one, or after aclose)
            return ""
        call = calls.pop()
        if not calls:
            del self._mine[(pool, member)]
        return call

    def _member_keys(self, pool: str, member: str) -> tuple[str, str, str]:
        return self._member_key(pool, member), self._in_flight_key(pool, member), self._use_key(pool, member)

    def _tag(self, pool: str) -> str:
        return f"{self._prefix}{{{pool}}}:"

    def _member_key(self, pool: str, member: str) -> str:
        return f"{self._tag(pool)}m:{member}"

    def _in_flight_key(self, pool: str, member: str) -> str:
        return f"{self._tag(pool)}f:{member}"

    def _use_key(self, pool: str, member: str) -> str:
        return f"{self._tag(pool)}u:{member}"

    def _landed_key(self, pool: str) -> str:
        return f"{self._tag(pool)}w:{self._process}"

    def _affinity_key(self, pool: str, key: str) -> str:
        return f"{self._tag(pool)}k:{key}"


def _load(fields: Sequence[bytes | int | None], unseen: _Unseen, now: float) -> Load:
    in_flight, latency, measured_at, cooldown, requests, tokens = fields
    average = None
    if latency is not None and measured_at is not None and now - float(measured_at) < LATENCY_STALE_S:
        average = float(latency)
    return Load(max(int(in_flight or 0) + unseen.in_flight, 0), average, int(requests or 0) + unseen.requests,
                int(tokens or 0) + unseen.tokens, float(cooldown or 0.0))


def _affine(value: bytes | None, now: float) -> str | None:
    if value is None:
        return None
    expires, _, member = value.decode().partition("|")
    return member if float(expires) > now else None


def _number(value: float | None) -> str:
    return "" if value is None else repr(float(value))
