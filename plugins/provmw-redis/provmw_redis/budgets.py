"""Shared budgets: reserve, renew and settle as Lua scripts over integer amounts, one round trip each.

The semantics are the core stores' (``provmw.stores.budgets``): a reservation is all or
nothing across its buckets, its lease expires, a settle counts once, even late. Every key
carries the hash tag ``{<prefix>:budget}``, so the scripts touch one slot and also run on
a Redis Cluster. A bucket of a calendar window is kept 35 days past its end, then expires.
Leases expire by the server's clock (``TIME``, read inside each script), never by the caller's
``now``: a process whose clock is skewed can neither expire another's lease early nor stretch
its own (ADR 0044). While Redis is unreachable every
method raises ``RedisUnavailableError``, which the budget middleware turns into its
``failure_policy``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import attrs

from provmw.stores.budgets import DIMENSIONS, Amounts, BucketId, BucketState, Charge, Refusal
from provmw_redis.backend import RedisUnavailableError, lua_limits, milliseconds
from provmw_redis.durability import forgets_spend

if TYPE_CHECKING:
    from provmw_redis.backend import RedisState

__all__ = ["RedisBudgetStore"]

log = logging.getLogger(__name__)

_KEEP_WINDOW_S = 35 * 86_400.0  # past its end, so last month's spend is still there to read
_KEEP_EXPIRED_S = 86_400.0  # an expired reservation may still be settled for a day


class RedisBudgetStore:
    """A ``BudgetStore`` shared by every process that names the same Redis and key prefix."""

    def __init__(self, state: RedisState, *, clock: Callable[[], float] | None = None) -> None:
        self._state = state
        self._clock = clock  # None: the server's TIME; a clock of their own only for tests
        self._forgetting_asked = False
        self._prefix = f"{{{state.options.key_prefix}:budget}}:"
        self._index = self._prefix + "buckets"
        self._reserve = state.script("budget_reserve", common="budget_common")
        self._renew = state.script("budget_renew", common="budget_common")
        self._settle = state.script("budget_settle", common="budget_common")
        self._states = state.script("budget_states", common="budget_common")

    async def reserve(self, reservation_id: str, charges: Sequence[Charge], *, now: float,
                      lease_s: float) -> Refusal | None:
        if not self._forgetting_asked:
            await self._warn_if_it_forgets()
        args: list[str | int | float] = [self._prefix, self._now(), repr(lease_s), reservation_id,
                                         milliseconds(lease_s + _KEEP_EXPIRED_S), len(charges)]
        for charge in charges:
            b = charge.bucket
            limits = lua_limits(attrs.astuple(charge.limits))
            args += [b.key, json.dumps(attrs.astuple(b)), _keep_until_ms(b), *limits, *attrs.astuple(charge.amount)]
        refused = await self._state.run(
            lambda: self._reserve(keys=[self._index, self._reservation(reservation_id)], args=args))
        if not refused:
            return None
        index, dimension, limit, spent, reserved = (int(v) for v in refused)
        return Refusal(charges[index - 1].bucket, DIMENSIONS[dimension - 1], limit, spent, reserved)

    async def renew(self, reservation_id: str, *, now: float, lease_s: float) -> None:
        await self._state.run(lambda: self._renew(keys=[self._reservation(reservation_id)], args=[
            self._prefix, self._now(), repr(lease_s), milliseconds(lease_s + _KEEP_EXPIRED_S)]))

    async def settle(self, reservation_id: str, actual: Amounts) -> None:
        await self._state.run(lambda: self._settle(
            keys=[self._reservation(reservation_id)], args=[self._prefix, *attrs.astuple(actual)]))

    async def states(self, *, now: float) -> list[BucketState]:
        rows = await self._state.run(lambda: self._states(keys=[self._index], args=[self._prefix, self._now()]))
        result = []
        for i in range(0, len(rows), 7):
            bucket = BucketId(*json.loads(rows[i]))
            held = [int(v) for v in rows[i + 1:i + 7]]
            result.append(BucketState(bucket, Amounts(*held[:3]), Amounts(*held[3:])))
        return result

    async def aclose(self) -> None:
        return None  # the backend's client is closed with the manager

    async def _warn_if_it_forgets(self) -> None:
        """Once, when the server first answers: a warning if it would forget the spend (restart, eviction)."""
        self._forgetting_asked = True  # the calls meanwhile do not ask again
        try:
            problem = await forgets_spend(self._state)
        except RedisUnavailableError:
            self._forgetting_asked = False  # asked again once it answers; the reserve fails as it would
            return
        if problem is not None:
            log.warning("budget: %s", problem)

    def _now(self) -> str:
        return "" if self._clock is None else repr(self._clock())

    def _reservation(self, reservation_id: str) -> str:
        return f"{self._prefix}r:{reservation_id}"


def _keep_until_ms(bucket: BucketId) -> int:
    if bucket.resets_at is None:
        return 0
    return milliseconds(datetime.fromisoformat(bucket.resets_at).timestamp() + _KEEP_WINDOW_S)
