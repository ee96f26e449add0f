"""What a store that cannot be reached means, per concern: the one place that applies the rule.

========================  ==============================================================
concern                   when its store fails (ADR 0013)
========================  ==============================================================
``cache``                 a miss: nothing is read or stored, no claim is waited for
``budget``                reserve: the budget's ``failure_policy`` (``fail_closed``:
                          ``BudgetUnavailableError`` before any request; ``fail_open``: the
                          call goes uncounted); renew: logged, the lease holds; settle:
                          kept (at most 10,000) and written before the next step once the
                          store answers (:mod:`provmw.stores.budgets.kept_settles`)
``circuit_breaker``,      unreachable (``ConnectionError``, ``TimeoutError``): this
``rate_limit``            process's own embedded store decides; each outcome goes back
                          to the store that admitted it. Any other error is a bug and
                          propagates
``usage``                 the journal spills every record the store cannot take and
                          replays it later (:mod:`provmw.stores.usage.journal`); its
                          ``failure_policy`` says whether new calls are refused meanwhile
========================  ==============================================================

A call that found its store failing gives the event loop a turn before it goes on (refused,
a miss, or this process's own store): a refused caller that retries at once would otherwise
never let the loop run, and the store's own connections and timers, the way back out of the
outage, would wait for as long as it spins.

:class:`provmw.state.State` wraps every store it hands out in these guards, so the
middleware and the stores themselves never decide what an outage means. Each guard logs
one warning per outage, not one per call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from typing import Literal, TypeVar

import attrs

from provmw.errors import BudgetUnavailableError
from provmw.stores.breakers import Admission, BreakerPolicy, BreakerStore, Transition
from provmw.stores.budgets import Amounts, BucketState, BudgetStore, Charge, Refusal
from provmw.stores.budgets.kept_settles import MAX_KEPT_SETTLES, KeptSettles
from provmw.stores.cache import CacheStore
from provmw.stores.pools import PoolState, PoolView
from provmw.stores.rate_limits import Grant, RateLimiter, RateLimits

__all__ = ["BudgetFailurePolicy", "GuardedBreakers", "GuardedBudgets", "GuardedCache", "GuardedPoolState",
           "GuardedRateLimiter"]

log = logging.getLogger(__name__)

T = TypeVar("T")

BudgetFailurePolicy = Literal["fail_closed", "fail_open"]

_LOCAL_PERMIT = "local"
# How a shared store says it cannot be reached (RedisUnavailableError is a ConnectionError).
_UNREACHABLE = (ConnectionError, TimeoutError)


class _Outage:
    """Runs store calls for one concern, logging its outage once when it starts and once when it ends."""

    __slots__ = ("_concern", "_consequence", "down")

    def __init__(self, concern: str, consequence: str) -> None:
        self._concern, self._consequence = concern, consequence
        self.down = False

    async def call(self, work: Awaitable[T], otherwise: T,
                   failures: tuple[type[Exception], ...] = (Exception,)) -> T:
        """``work``'s result, or ``otherwise`` when the store fails with one of ``failures``."""
        try:
            result = await work
        except failures as exc:
            await self.failed(exc)
            return otherwise
        self.ok()
        return result

    async def failed(self, exc: Exception) -> None:
        """Note the failure (logged once per outage), and give the loop a turn."""
        self.noted(exc)
        await asyncio.sleep(0)

    def noted(self, exc: Exception) -> None:
        if not self.down:
            log.warning("%s: the store failed (%s: %s); %s", self._concern, type(exc).__name__, exc,
                        self._consequence)
        self.down = True

    def ok(self) -> None:
        if self.down:
            log.warning("%s: the store answers again", self._concern)
        self.down = False


class GuardedCache:
    """A ``CacheStore`` whose failures are misses; a failed claim means nobody to wait for."""

    def __init__(self, store: CacheStore) -> None:
        self.store = store
        self._outage = _Outage("cache", "serving misses")
        self.grants_every_claim: bool = getattr(store, "grants_every_claim", False)
        self.keeps_answers: bool = getattr(store, "keeps_answers", False)

    async def get(self, key: str) -> str | None:
        return await self._outage.call(self.store.get(key), None)

    # The memory store's own (``keeps_answers``): passed on, failures are misses like the rest.
    def kept(self, key: str) -> object | None:
        try:
            found = self.store.kept(key)  # type: ignore[attr-defined]
        except Exception as exc:
            self._outage.noted(exc)
            return None
        self._outage.ok()
        return found  # type: ignore[no-any-return]

    def keep(self, key: str, value: object, size: int, ttl_s: float) -> None:
        try:
            self.store.keep(key, value, size, ttl_s)  # type: ignore[attr-defined]
        except Exception as exc:
            self._outage.noted(exc)
            return
        self._outage.ok()

    async def set(self, key: str, value: str, ttl_s: float) -> None:
        await self._outage.call(self.store.set(key, value, ttl_s), None)

    async def delete(self, key: str) -> None:
        await self._outage.call(self.store.delete(key), None)

    async def claim(self, key: str, ttl_s: float) -> str | None:
        return await self._outage.call(self.store.claim(key, ttl_s), "")

    async def unclaim(self, key: str, token: str) -> None:
        await self._outage.call(self.store.unclaim(key, token), None)  # the claim also expires by itself


class GuardedBudgets:
    """A ``BudgetStore`` whose failure to reserve follows the budget's ``failure_policy``."""

    def __init__(self, store: BudgetStore, policy: BudgetFailurePolicy = "fail_closed", *,
                 max_kept_settles: int = MAX_KEPT_SETTLES) -> None:
        self.store, self.policy = store, policy
        calls = "calls go uncounted" if policy == "fail_open" else "calls are refused"
        self._outage = _Outage("budget", f"{calls} (failure_policy={policy}); settles are kept (at most "
                                         f"{max_kept_settles}) until it answers")
        self.kept = KeptSettles(max_kept_settles)  # settles that failed, until the store answers

    async def reserve(self, reservation_id: str, charges: Sequence[Charge], *, now: float,
                      lease_s: float) -> Refusal | None:
        if self.kept:  # what the outage's calls spent counts before this call does
            await self.kept.write(self.store)
        try:
            refusal = await self.store.reserve(reservation_id, charges, now=now, lease_s=lease_s)
        except Exception as exc:
            await asyncio.sleep(0)  # a refusal, or an uncounted call: either way the loop gets a turn
            if self.policy == "fail_closed":
                raise BudgetUnavailableError(
                    f"budget: the store could not reserve ({type(exc).__name__}: {exc}); refused before any "
                    "request (failure_policy=fail_closed)") from exc
            self._outage.noted(exc)
            self.kept.unreserved(reservation_id)  # its settle has nothing to settle
            return None  # fail_open: the call goes uncounted
        self._outage.ok()
        return refusal

    async def renew(self, reservation_id: str, *, now: float, lease_s: float) -> None:
        try:
            await self.store.renew(reservation_id, now=now, lease_s=lease_s)
        except Exception as exc:  # the next renewal tries again; meanwhile the lease holds
            log.warning("budget: could not renew reservation %s (%s: %s)", reservation_id, type(exc).__name__, exc)

    async def settle(self, reservation_id: str, actual: Amounts) -> None:
        # The call is over either way: a failing store must not turn an answer into an error. The
        # settle is kept and written once the store answers (``_kept_settles``).
        if self.kept.was_unreserved(reservation_id):
            return
        try:
            await self.store.settle(reservation_id, actual)
        except Exception as exc:
            self._outage.noted(exc)
            self.kept.keep(reservation_id, actual)
            return
        if self.kept:
            await self.kept.write(self.store)

    async def states(self, *, now: float) -> list[BucketState]:
        await self.kept.write(self.store)
        return await self.store.states(now=now)

    async def aclose(self) -> None:
        try:
            await self.kept.write(self.store)
            self.kept.abandon()
        finally:
            await self.store.aclose()


class GuardedBreakers:
    """A shared ``BreakerStore`` that this process's own ``local`` store stands in for.

    An admission made locally carries a negative generation, so its outcome goes back to
    the store that admitted it.
    """

    def __init__(self, shared: BreakerStore, local: BreakerStore) -> None:
        self.shared, self.local = shared, local
        self._outage = _Outage("circuit_breaker", "this process's breakers decide")

    async def admit(self, key: str, policy: BreakerPolicy, now: float) -> Admission:
        try:
            admission = await self.shared.admit(key, policy, now)
        except _UNREACHABLE as exc:
            await self._outage.failed(exc)
            return _flipped(await self.local.admit(key, policy, now))
        self._outage.ok()
        return admission

    async def record(self, key: str, admission: Admission, policy: BreakerPolicy, *,
                     failed: bool, slow: bool, now: float) -> Transition | None:
        if admission.generation < 0:
            return await self.local.record(key, _flipped(admission), policy, failed=failed, slow=slow, now=now)
        # An outcome lost to an outage is lost; the next calls go by this process's breaker.
        return await self._outage.call(
            self.shared.record(key, admission, policy, failed=failed, slow=slow, now=now), None, _UNREACHABLE)

    async def release(self, key: str, admission: Admission) -> None:
        if admission.generation < 0:
            await self.local.release(key, _flipped(admission))
        else:  # a probe permit lost to an outage is given up by its lease
            await self._outage.call(self.shared.release(key, admission), None, _UNREACHABLE)


def _flipped(admission: Admission) -> Admission:
    return attrs.evolve(admission, generation=-1 - admission.generation)


class GuardedRateLimiter:
    """A shared ``RateLimiter`` that this process's own ``local`` limiter stands in for."""

    def __init__(self, shared: RateLimiter, local: RateLimiter) -> None:
        self.shared, self.local = shared, local
        self._outage = _Outage("rate_limit", "this process's limits decide")

    async def acquire(self, key: str, limits: RateLimits, tokens: int, now: float) -> Grant:
        try:
            grant = await self.shared.acquire(key, limits, tokens, now)
        except _UNREACHABLE as exc:
            await self._outage.failed(exc)
            return attrs.evolve(await self.local.acquire(key, limits, tokens, now), permit=_LOCAL_PERMIT)
        self._outage.ok()
        return grant

    async def release(self, key: str, limits: RateLimits, *, permit: str, reserved: int, used: int,
                      now: float) -> None:
        store = self.local if permit == _LOCAL_PERMIT else self.shared
        # A shared slot lost to an outage is freed by its lease.
        await self._outage.call(store.release(key, limits, permit=permit, reserved=reserved, used=used, now=now),
                                None, _UNREACHABLE)


class GuardedPoolState:
    """A shared ``PoolState`` that this process's own ``local`` state stands in for: while the shared
    one is unreachable, choices are made on what this process knows, never refused (ADR 0051)."""

    def __init__(self, shared: PoolState, local: PoolState) -> None:
        self.shared, self.local = shared, local
        self._outage = _Outage("pool", "this process's view of the pools decides")

    async def read(self, pool: str, members: Sequence[str], key: str | None, now: float) -> PoolView:
        try:
            view = await self.shared.read(pool, members, key, now)
        except _UNREACHABLE as exc:
            await self._outage.failed(exc)
            return await self.local.read(pool, members, key, now)
        self._outage.ok()
        return view

    async def started(self, pool: str, member: str, *, key: str | None, tokens: int, now: float,
                      key_ttl_s: float) -> None:
        await self.local.started(pool, member, key=key, tokens=tokens, now=now, key_ttl_s=key_ttl_s)
        await self._outage.call(self.shared.started(pool, member, key=key, tokens=tokens, now=now,
                                                    key_ttl_s=key_ttl_s), None, _UNREACHABLE)

    async def ended(self, pool: str, member: str, *, now: float, latency_s: float | None,
                    cooldown_until: float | None) -> None:
        await self.local.ended(pool, member, now=now, latency_s=latency_s, cooldown_until=cooldown_until)
        await self._outage.call(self.shared.ended(pool, member, now=now, latency_s=latency_s,
                                                  cooldown_until=cooldown_until), None, _UNREACHABLE)

    async def aclose(self) -> None:
        await self.local.aclose()
        await self.shared.aclose()
