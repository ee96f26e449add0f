"""What a store that cannot be reached means, per concern: the one place that applies the rule.

========================  ==============================================================
concern                   when its store fails (ADR 0013)
========================  ==============================================================
``cache``                 a miss: nothing is read or stored, no claim is waited for
``budget``                reserve: the budget's ``failure_policy`` (``fail_closed``:
                          ``BudgetUnavailableError`` before any request; ``fail_open``: the
                          call goes uncounted); renew and settle: logged, the lease frees
                          the hold
``circuit_breaker``,      this process's own embedded store decides; each outcome goes
``rate_limit``            back to the store that admitted it
``usage``                 the journal keeps every record and retries
                          (:mod:`provmw.stores.journal`); its ``failure_policy`` says what
                          a full journal means
========================  ==============================================================

:class:`provmw.state.State` wraps every store it hands out in these guards, so the
middleware and the stores themselves never decide what an outage means. Each guard logs
one warning per outage, not one per call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal

import attrs

from provmw.errors import BudgetUnavailableError
from provmw.stores.breakers import Admission, BreakerPolicy, BreakerStore, Transition
from provmw.stores.budgets import Amounts, BucketState, BudgetStore, Charge, Refusal
from provmw.stores.cache import CacheStore
from provmw.stores.rate_limits import Grant, RateLimiter, RateLimits

__all__ = ["BudgetFailurePolicy", "GuardedBreakers", "GuardedBudgets", "GuardedCache", "GuardedRateLimiter"]

log = logging.getLogger(__name__)

BudgetFailurePolicy = Literal["fail_closed", "fail_open"]

_LOCAL_PERMIT = "local"


class _Outage:
    """Logs a concern's outage once when it starts and once when it ends."""

    __slots__ = ("_concern", "_consequence", "down")

    def __init__(self, concern: str, consequence: str) -> None:
        self._concern, self._consequence = concern, consequence
        self.down = False

    def failed(self, exc: Exception) -> None:
        if not self.down:
            log.warning("%s: the store failed (%s: %s); %s", self._concern, type(exc).__name__, exc,
                        self._consequence)
        self.down = True

    def ok(self) -> None:
        if self.down:
            log.warning("%s: the store answers again", self._concern)
        self.down = False


class GuardedCache:
    """A ``CacheStore`` whose failures are misses."""

    def __init__(self, store: CacheStore) -> None:
        self.store = store
        self._outage = _Outage("cache", "serving misses")

    async def get(self, key: str) -> str | None:
        try:
            text = await self.store.get(key)
        except Exception as exc:
            self._outage.failed(exc)
            return None
        self._outage.ok()
        return text

    async def set(self, key: str, value: str, ttl_s: float) -> None:
        try:
            await self.store.set(key, value, ttl_s)
        except Exception as exc:
            self._outage.failed(exc)

    async def delete(self, key: str) -> None:
        try:
            await self.store.delete(key)
        except Exception as exc:
            self._outage.failed(exc)

    async def claim(self, key: str, ttl_s: float) -> str | None:
        try:
            return await self.store.claim(key, ttl_s)
        except Exception as exc:
            self._outage.failed(exc)
            return ""  # nobody to wait for: go upstream

    async def unclaim(self, key: str, token: str) -> None:
        try:
            await self.store.unclaim(key, token)
        except Exception as exc:  # the claim expires by itself
            self._outage.failed(exc)


class GuardedBudgets:
    """A ``BudgetStore`` whose failure to reserve follows the budget's ``failure_policy``."""

    def __init__(self, store: BudgetStore, policy: BudgetFailurePolicy = "fail_closed") -> None:
        self.store, self.policy = store, policy
        self._outage = _Outage("budget", f"calls go uncounted (failure_policy={policy})")

    async def reserve(self, reservation_id: str, charges: Sequence[Charge], *, now: float,
                      lease_s: float) -> Refusal | None:
        try:
            refusal = await self.store.reserve(reservation_id, charges, now=now, lease_s=lease_s)
        except Exception as exc:
            if self.policy == "fail_closed":
                raise BudgetUnavailableError(
                    f"budget: the store could not reserve ({type(exc).__name__}: {exc}); refused before any "
                    "request (failure_policy=fail_closed)") from exc
            self._outage.failed(exc)
            return None  # fail_open: the call goes uncounted
        self._outage.ok()
        return refusal

    async def renew(self, reservation_id: str, *, now: float, lease_s: float) -> None:
        try:
            await self.store.renew(reservation_id, now=now, lease_s=lease_s)
        except Exception as exc:  # the next renewal tries again; meanwhile the lease holds
            log.warning("budget: could not renew reservation %s (%s: %s)", reservation_id, type(exc).__name__, exc)

    async def settle(self, reservation_id: str, actual: Amounts) -> None:
        # The call is over either way: a failing store must not turn an answer into an error.
        # The lease frees the reservation; the usage ledger still has the spend.
        try:
            await self.store.settle(reservation_id, actual)
        except Exception:
            log.exception("budget: could not settle reservation %s; its lease will expire", reservation_id)

    async def states(self, *, now: float) -> list[BucketState]:
        return await self.store.states(now=now)

    async def aclose(self) -> None:
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
        except Exception as exc:
            self._outage.failed(exc)
            return _flipped(await self.local.admit(key, policy, now))
        self._outage.ok()
        return admission

    async def record(self, key: str, admission: Admission, policy: BreakerPolicy, *,
                     failed: bool, slow: bool, now: float) -> Transition | None:
        if admission.generation < 0:
            return await self.local.record(key, _flipped(admission), policy, failed=failed, slow=slow, now=now)
        try:
            return await self.shared.record(key, admission, policy, failed=failed, slow=slow, now=now)
        except Exception as exc:  # the outcome is lost; the next calls go by this process's breaker
            self._outage.failed(exc)
            return None

    async def release(self, key: str, admission: Admission) -> None:
        if admission.generation < 0:
            await self.local.release(key, _flipped(admission))
            return
        try:
            await self.shared.release(key, admission)
        except Exception as exc:  # a probe permit lost to an outage is given up by its lease
            self._outage.failed(exc)


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
        except Exception as exc:
            self._outage.failed(exc)
            return attrs.evolve(await self.local.acquire(key, limits, tokens, now), permit=_LOCAL_PERMIT)
        self._outage.ok()
        return grant

    async def release(self, key: str, limits: RateLimits, *, permit: str, reserved: int, used: int,
                      now: float) -> None:
        store = self.local if permit == _LOCAL_PERMIT else self.shared
        try:
            await store.release(key, limits, permit=permit, reserved=reserved, used=used, now=now)
        except Exception as exc:  # a shared slot's lease frees it
            self._outage.failed(exc)
