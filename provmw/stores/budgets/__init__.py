"""Budget state: what each bucket has spent, and the reservations held against it.

Amounts are integers (micro-dollars, tokens, requests), so no rounding drifts. A
reservation is all-or-nothing across the buckets a call touches, and carries a lease:
once ``expires_at`` passes, it no longer counts against its buckets (the process holding
it has died, or forgot it). Settling adds the real amounts to ``spent`` and removes the
reservation; settling it again, or settling one unknown to the store, changes nothing.
An expired reservation can still be settled, and counts once.

Leases go by the store's clock (ADR 0044). A shared store reads its own, inside the step that
judges them (SQLite: the clock of the host holding the file, in the transaction; Redis: the
server's ``TIME``), so a process whose clock is skewed can neither expire another's lease early
nor stretch its own; the ``now`` callers pass only serves the memory store, which one process
owns, so its caller's clock is the store's.

The memory store is here; the SQLite one, shared by processes, is ``budgets_sqlite``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

import attrs

__all__ = [
    "Amounts",
    "BucketId",
    "BucketState",
    "BudgetStore",
    "Charge",
    "Limits",
    "MemoryBudgetStore",
    "Refusal",
    "one_per_bucket",
]

DIMENSIONS = ("cost_micro_usd", "tokens", "requests")
KEEP_EXPIRED_S = 86_400.0  # an expired reservation may still be settled for a day


def _never_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    # A negative settle would credit a bucket back: no store may ever be handed one.
    if value < 0:
        raise ValueError(f"budget amounts are never negative: {attribute.name}={value}")


@attrs.frozen
class Amounts:
    """Micro-dollars, tokens and requests, none of them negative."""

    cost_micro_usd: int = attrs.field(default=0, validator=_never_negative)
    tokens: int = attrs.field(default=0, validator=_never_negative)
    requests: int = attrs.field(default=0, validator=_never_negative)

    def __add__(self, other: Amounts) -> Amounts:
        return Amounts(self.cost_micro_usd + other.cost_micro_usd, self.tokens + other.tokens,
                       self.requests + other.requests)


@attrs.frozen
class Limits:
    """The most a bucket may hold per dimension; None is no limit."""

    cost_micro_usd: int | None = None
    tokens: int | None = None
    requests: int | None = None


@attrs.frozen
class BucketId:
    """Whose bucket (scope and subject), for which period and calendar window."""

    scope: str
    subject: str
    period: str
    window: str
    resets_at: str | None = None

    @property
    def key(self) -> str:
        return "\x1f".join((self.scope, self.subject, self.period, self.window))


@attrs.frozen
class Charge:
    """What a call reserves against one bucket, and that bucket's limits."""

    bucket: BucketId
    limits: Limits
    amount: Amounts


@attrs.frozen
class Refusal:
    """Why a reservation was refused: the first bucket and dimension that would overflow."""

    bucket: BucketId
    dimension: str
    limit: int
    spent: int
    reserved: int


@attrs.frozen
class BucketState:
    """A bucket's spend and its live (unexpired) reservations."""

    bucket: BucketId
    spent: Amounts
    reserved: Amounts


def check(charge: Charge, spent: Amounts, reserved: Amounts) -> Refusal | None:
    """The refusal for ``charge`` given what its bucket holds, or None when it fits."""
    for dimension in DIMENSIONS:
        limit = getattr(charge.limits, dimension)
        held = getattr(spent, dimension) + getattr(reserved, dimension)
        if limit is not None and held + getattr(charge.amount, dimension) > limit:
            return Refusal(charge.bucket, dimension, limit, getattr(spent, dimension), getattr(reserved, dimension))
    return None


def one_per_bucket(charges: Sequence[Charge]) -> Sequence[Charge]:
    """One charge per bucket: two limits on one bucket (a cost and a request limit written apart, a
    ``*`` limit and one naming the subject) make one charge with the tighter limit in each dimension."""
    if len(charges) < 2 or len({charge.bucket.key for charge in charges}) == len(charges):
        return charges
    merged: dict[str, Charge] = {}
    for charge in charges:
        seen = merged.get(charge.bucket.key)
        if seen is None:
            merged[charge.bucket.key] = charge
            continue
        limits = Limits(*(_tighter(getattr(seen.limits, d), getattr(charge.limits, d)) for d in DIMENSIONS))
        amount = Amounts(*(max(getattr(seen.amount, d), getattr(charge.amount, d)) for d in DIMENSIONS))
        merged[charge.bucket.key] = Charge(seen.bucket, limits, amount)
    return list(merged.values())


def _tighter(first: int | None, second: int | None) -> int | None:
    return second if first is None else first if second is None else min(first, second)


class BudgetStore(Protocol):
    """Reserve, renew, settle, release; served by memory and SQLite here, Redis by its plugin.

    ``now`` is the caller's wall clock; a store shared by processes judges leases by its own
    clock instead (see the module's text)."""

    async def reserve(self, reservation_id: str, charges: Sequence[Charge], *, now: float,
                      lease_s: float) -> Refusal | None: ...

    async def renew(self, reservation_id: str, *, now: float, lease_s: float) -> None: ...

    async def settle(self, reservation_id: str, actual: Amounts) -> None: ...

    async def states(self, *, now: float) -> list[BucketState]: ...

    async def aclose(self) -> None: ...


@attrs.define
class _Held:
    bucket: BucketId
    amount: Amounts
    expires_at: float


class MemoryBudgetStore:
    """One process's budgets; every operation is atomic under one lock."""

    def __init__(self) -> None:
        self._spent: dict[str, Amounts] = {}
        self._buckets: dict[str, BucketId] = {}
        self._held: dict[str, dict[str, _Held]] = {}  # bucket key -> reservation id -> hold
        self._lock = threading.Lock()

    async def reserve(self, reservation_id: str, charges: Sequence[Charge], *, now: float,
                      lease_s: float) -> Refusal | None:
        with self._lock:
            for charge in charges:
                key = charge.bucket.key
                refusal = check(charge, self._spent.get(key, Amounts()), self._reserved(key, now))
                if refusal is not None:
                    return refusal
            for charge in charges:
                key = charge.bucket.key
                self._buckets.setdefault(key, charge.bucket)
                self._held.setdefault(key, {})[reservation_id] = _Held(charge.bucket, charge.amount, now + lease_s)
            return None

    async def renew(self, reservation_id: str, *, now: float, lease_s: float) -> None:
        with self._lock:
            for holds in self._held.values():
                held = holds.get(reservation_id)
                if held is not None:
                    held.expires_at = max(held.expires_at, now + lease_s)

    async def settle(self, reservation_id: str, actual: Amounts) -> None:
        with self._lock:
            for key, holds in self._held.items():
                if holds.pop(reservation_id, None) is not None:
                    self._spent[key] = self._spent.get(key, Amounts()) + actual

    async def states(self, *, now: float) -> list[BucketState]:
        with self._lock:
            return [BucketState(bucket, self._spent.get(key, Amounts()), self._reserved(key, now))
                    for key, bucket in self._buckets.items()]

    async def aclose(self) -> None:
        return None

    def _reserved(self, key: str, now: float) -> Amounts:
        holds = self._held.get(key, {})
        for rid in [rid for rid, h in holds.items() if h.expires_at < now - KEEP_EXPIRED_S]:
            del holds[rid]
        live = [h.amount for h in holds.values() if h.expires_at > now]
        return Amounts(sum(a.cost_micro_usd for a in live), sum(a.tokens for a in live),
                       sum(a.requests for a in live))
