"""Circuit breaker state: the policy, the store interface, and the in-memory store.

A store owns the state of every breaker it is asked about and applies the state machine
atomically, so that the same semantics hold whether it lives in this process (memory) or
is shared by many (the Redis plugin)::

    CLOSED --(window full enough, failure or slow rate >= threshold)--> OPEN
    OPEN   --(open_s elapsed; next admit)--> HALF_OPEN
    HALF_OPEN --(half_open_probes successes)--> CLOSED
    HALF_OPEN --(any probe fails)--> OPEN

Every transition bumps a generation; a result from a call admitted under an older
generation is ignored, so a slow call started before the breaker opened cannot close it.
"""

from __future__ import annotations

import collections
import enum
from typing import Protocol

import attrs

from provmw._base.bounded import MAX_NAMES, KeepingLRU
from provmw.errors import ConfigurationError
from provmw.options import number

__all__ = ["Admission", "BreakerPolicy", "BreakerState", "BreakerStore", "MemoryBreakerStore", "Transition"]

_rate = number(gt=0, le=1)
_count = number(ge=1, integer=True)


class BreakerState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@attrs.frozen
class BreakerPolicy:
    """``[middleware.circuit_breaker]``: when a breaker opens, how long, how it probes."""

    window_size: int = attrs.field(default=20, validator=_count)
    min_calls: int = attrs.field(default=10, validator=_count)
    failure_rate: float = attrs.field(default=0.5, validator=_rate)
    slow_call_s: float | None = attrs.field(default=None, validator=number(gt=0, optional=True))
    slow_call_rate: float = attrs.field(default=1.0, validator=_rate)
    open_s: float = attrs.field(default=30.0, validator=number(gt=0))
    half_open_probes: int = attrs.field(default=3, validator=_count)

    def __attrs_post_init__(self) -> None:
        if self.min_calls > self.window_size:
            raise ConfigurationError(f"min_calls ({self.min_calls}) cannot exceed window_size ({self.window_size})")


@attrs.frozen
class Transition:
    """A breaker changed state; whoever receives it logs it (once)."""

    key: str
    before: BreakerState
    after: BreakerState


@attrs.frozen
class Admission:
    """The store's answer to "may this call go?"."""

    admitted: bool
    generation: int
    probe: bool = False
    retry_after_s: float = 0.0
    transition: Transition | None = None


class BreakerStore(Protocol):
    """Where breaker state lives; every method is atomic for the breaker ``key``."""

    async def admit(self, key: str, policy: BreakerPolicy, now: float) -> Admission:
        """Admit the call or refuse it (open, or every half-open probe already out)."""
        ...

    async def record(self, key: str, admission: Admission, policy: BreakerPolicy, *,
                     failed: bool, slow: bool, now: float) -> Transition | None:
        """Count the outcome of an admitted call (``slow`` only when the policy sets ``slow_call_s``)."""
        ...

    async def release(self, key: str, admission: Admission) -> None:
        """Give back an admitted call's permit without counting it (cancelled, ignored error)."""
        ...


@attrs.define
class _Breaker:
    state: BreakerState = BreakerState.CLOSED
    generation: int = 0
    window: collections.deque[tuple[bool, bool]] = attrs.Factory(collections.deque)
    failures: int = 0  # running counts over the window, so no call sums it
    slow_calls: int = 0
    opened_at: float = 0.0
    probes_out: int = 0
    probes_passed: int = 0


class MemoryBreakerStore:
    """Breaker state in this process; atomic because no method awaits while it decides.

    At most ``max_keys`` breakers are kept (ad-hoc calls choose endpoints). A full store
    forgets the least recently used closed breaker, which loses at most a window of
    outcomes; an open or half-open one goes only when every breaker is, and a live
    endpoint's breaker is not the least recently used: every call, even a refused one,
    touches it.
    """

    def __init__(self, max_keys: int = MAX_NAMES) -> None:
        self._breakers: KeepingLRU[str, _Breaker] = KeepingLRU(
            max_keys, keep=lambda b: b.state is not BreakerState.CLOSED)

    def state(self, key: str) -> BreakerState:
        """The breaker's current state (closed if never seen)."""
        breaker = self._breakers.get(key)
        return breaker.state if breaker is not None else BreakerState.CLOSED

    async def admit(self, key: str, policy: BreakerPolicy, now: float) -> Admission:
        b = self._breakers.used(key)
        if b is None:
            b = self._breakers[key] = _Breaker(window=collections.deque(maxlen=policy.window_size))
        if b.state is BreakerState.CLOSED:
            return Admission(True, b.generation)
        transition = None
        if b.state is BreakerState.OPEN:
            waited = now - b.opened_at
            if waited < policy.open_s:
                return Admission(False, b.generation, retry_after_s=policy.open_s - waited)
            transition = _move(key, b, BreakerState.HALF_OPEN, now)
        if b.probes_out + b.probes_passed >= policy.half_open_probes:
            return Admission(False, b.generation, retry_after_s=policy.open_s, transition=transition)
        b.probes_out += 1
        return Admission(True, b.generation, probe=True, transition=transition)

    async def record(self, key: str, admission: Admission, policy: BreakerPolicy, *,
                     failed: bool, slow: bool, now: float) -> Transition | None:
        b = self._breakers.get(key)
        if b is None or b.generation != admission.generation:
            return None
        if b.state is BreakerState.HALF_OPEN:
            b.probes_out -= 1
            if failed or slow:
                return _move(key, b, BreakerState.OPEN, now)
            b.probes_passed += 1
            if b.probes_passed >= policy.half_open_probes:
                return _move(key, b, BreakerState.CLOSED, now)
            return None
        if len(b.window) == b.window.maxlen:
            old_failed, old_slow = b.window[0]
            b.failures -= old_failed
            b.slow_calls -= old_slow
        b.window.append((failed, slow))
        b.failures += failed
        b.slow_calls += slow
        if len(b.window) >= policy.min_calls and _tripped(b, policy):
            return _move(key, b, BreakerState.OPEN, now)
        return None

    async def release(self, key: str, admission: Admission) -> None:
        b = self._breakers.get(key)
        if b is not None and admission.probe and b.generation == admission.generation:
            b.probes_out -= 1


def _tripped(b: _Breaker, policy: BreakerPolicy) -> bool:
    # Divide rather than multiply the threshold: 3/10 >= 0.3 holds, 3 >= 0.3*10 does not.
    calls = len(b.window)
    return b.failures / calls >= policy.failure_rate or b.slow_calls / calls >= policy.slow_call_rate


def _move(key: str, b: _Breaker, to: BreakerState, now: float) -> Transition:
    transition = Transition(key, b.state, to)
    b.state, b.generation = to, b.generation + 1
    b.window.clear()
    b.failures = b.slow_calls = b.probes_out = b.probes_passed = 0
    if to is BreakerState.OPEN:
        b.opened_at = now
    return transition
