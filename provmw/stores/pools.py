"""What the pool layer keeps about each deployment: calls in flight, latency, the last minute's use,
cool-downs and the affinity map (ADR 0051).

:class:`PoolState` is the contract; :class:`MemoryPoolState` serves one process, and a shared
backend (Redis) serves a fleet with the same contract. Everything expires: a latency average
older than :data:`LATENCY_STALE_S` is unknown again (so a recovered deployment is measured
anew), a request leaves the counts a minute after it started (a rolling minute, as providers
count), an affinity key ends with its TTL. Times are wall-clock
seconds, the same in every process of a fleet.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

import attrs

__all__ = ["LATENCY_ALPHA", "LATENCY_STALE_S", "WINDOW_S", "Load", "MemoryPoolState", "PoolState", "PoolView"]

LATENCY_ALPHA = 0.3  # the weight of the newest sample in the moving average
LATENCY_STALE_S = 60.0  # an average not updated for this long is unknown again
# Requests and tokens count over the last minute, rolling, as providers count theirs: a count by
# clock minutes would let twice a limit through either side of a minute's turn.
WINDOW_S = 60.0
_KEYS_KEPT = 100_000  # affinity keys one process remembers at most (oldest dropped first)


class Load(NamedTuple):
    """One deployment as the pool sees it: calls in flight, its latency average (None: unknown),
    the requests and tokens of the last minute, and until when it is skipped (a 429's hint, an
    open breaker). A named tuple: every choice makes one per deployment."""

    in_flight: int = 0
    latency_s: float | None = None
    requests: int = 0
    tokens: int = 0
    cooldown_until: float = 0.0


@attrs.frozen
class PoolView:
    """What one choice reads: each member's load, and the deployment the call's key is affine to."""

    loads: Mapping[str, Load]
    affine: str | None = None


class PoolState(Protocol):
    """Where a pool's load lives (embedded, or shared by a fleet)."""

    async def read(self, pool: str, members: Sequence[str], key: str | None, now: float) -> PoolView:
        """Each member's load now, and the deployment ``key`` (an affinity key) is kept with."""
        ...

    async def started(self, pool: str, member: str, *, key: str | None, tokens: int, now: float,
                      key_ttl_s: float) -> None:
        """A call leaves for ``member``: one more in flight, one request and ``tokens`` more in its
        rolling minute, and ``key`` (when given) kept with it for ``key_ttl_s``."""
        ...

    async def ended(self, pool: str, member: str, *, now: float, latency_s: float | None,
                    cooldown_until: float | None) -> None:
        """The call ended: one fewer in flight; ``latency_s`` (time to the answer or the first chunk)
        joins the average; ``cooldown_until`` skips the member until then."""
        ...

    async def aclose(self) -> None:
        """Release what the state holds."""
        ...


@attrs.define
class _Member:
    in_flight: int = 0
    latency_s: float | None = None
    measured_at: float = 0.0
    used: collections.deque[tuple[float, int]] = attrs.Factory(collections.deque)  # (started, tokens)
    tokens: int = 0
    cooldown_until: float = 0.0

    def load(self, now: float) -> Load:
        self.forget_before(now - WINDOW_S)
        fresh = self.latency_s is not None and now - self.measured_at < LATENCY_STALE_S
        return Load(self.in_flight, self.latency_s if fresh else None, len(self.used), self.tokens,
                    self.cooldown_until)

    def forget_before(self, since: float) -> None:
        used = self.used
        while used and used[0][0] <= since:
            self.tokens -= used.popleft()[1]


class MemoryPoolState:
    """One process's pool state; no awaits inside, so a choice and its start are one step."""

    def __init__(self) -> None:
        self._members: dict[tuple[str, str], _Member] = {}
        self._keys: collections.OrderedDict[tuple[str, str], tuple[str, float]] = collections.OrderedDict()

    async def read(self, pool: str, members: Sequence[str], key: str | None, now: float) -> PoolView:
        loads = {m: self._member(pool, m).load(now) for m in members}
        return PoolView(loads, self._affine(pool, key, now))

    async def started(self, pool: str, member: str, *, key: str | None, tokens: int, now: float,
                      key_ttl_s: float) -> None:
        state = self._member(pool, member)
        state.in_flight += 1
        state.forget_before(now - WINDOW_S)
        state.used.append((now, tokens))
        state.tokens += tokens
        if key is not None:
            self._keys[(pool, key)] = (member, now + key_ttl_s)
            self._keys.move_to_end((pool, key))
            if len(self._keys) > _KEYS_KEPT:
                self._keys.popitem(last=False)

    async def ended(self, pool: str, member: str, *, now: float, latency_s: float | None,
                    cooldown_until: float | None) -> None:
        state = self._member(pool, member)
        state.in_flight = max(state.in_flight - 1, 0)
        if latency_s is not None:
            fresh = state.latency_s is not None and now - state.measured_at < LATENCY_STALE_S
            state.latency_s = latency_s if not fresh or state.latency_s is None else \
                LATENCY_ALPHA * latency_s + (1 - LATENCY_ALPHA) * state.latency_s
            state.measured_at = now
        if cooldown_until is not None:
            state.cooldown_until = max(state.cooldown_until, cooldown_until)

    async def aclose(self) -> None:
        self._members.clear()
        self._keys.clear()

    def _member(self, pool: str, member: str) -> _Member:
        state = self._members.get((pool, member))
        if state is None:
            state = self._members[(pool, member)] = _Member()
        return state

    def _affine(self, pool: str, key: str | None, now: float) -> str | None:
        if key is None:
            return None
        kept = self._keys.get((pool, key))
        if kept is None or kept[1] <= now:
            return None
        return kept[0]
