"""An expired reservation stays settleable for the grace period the stores declare, purge or not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from provmw.stores.budgets import KEEP_EXPIRED_S, Amounts, BucketId, BudgetStore, Charge, Limits, MemoryBudgetStore
from provmw.stores.budgets.sqlite import SqliteBudgetStore
from provmw.testing import FakeClock

DAY = BucketId("user", "ada", "day", "2026-11-22")
OTHER = BucketId("user", "bob", "day", "2026-11-22")
PURGE_DUE_S = 7_200.0  # past the SQLite store's hourly purge, well within the day of grace


def charge(micro_usd: int, bucket: BucketId = DAY) -> Charge:
    return Charge(bucket, Limits(cost_micro_usd=1_000_000), Amounts(micro_usd, 10, 1))


@pytest.fixture
def clock() -> FakeClock:
    """The SQLite store's own clock (leases go by it); the tests pass the same time as ``now``."""
    return FakeClock(0.0)


@pytest.fixture(params=["memory", "sqlite", "sqlite-normal"])
async def store(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> AsyncIterator[BudgetStore]:
    made: BudgetStore = MemoryBudgetStore() if request.param == "memory" else SqliteBudgetStore(
        tmp_path / "b.db", synchronous="FULL" if request.param == "sqlite" else "NORMAL", clock=clock)
    yield made
    await made.aclose()


async def spent(store: BudgetStore, now: float) -> int:
    # A reserve on the same bucket makes every store look at (and purge) its reservations.
    await store.reserve("probe", [charge(0)], now=now, lease_s=5)
    return next(s.spent.cost_micro_usd for s in await store.states(now=now) if s.bucket == DAY)


async def test_a_late_settle_after_a_purge_within_the_grace_still_counts(store: BudgetStore, clock: FakeClock) -> None:
    await store.reserve("r1", [charge(900_000)], now=0, lease_s=5)
    clock.advance(PURGE_DUE_S)
    await store.reserve("r2", [charge(1, OTHER)], now=PURGE_DUE_S, lease_s=5)  # the purge runs here
    await store.reserve("r3", [charge(1)], now=PURGE_DUE_S, lease_s=5)
    await store.settle("r1", Amounts(300_000, 5, 1))
    assert await spent(store, PURGE_DUE_S) == 300_000


async def test_a_settle_later_than_the_grace_counts_nothing(store: BudgetStore, clock: FakeClock) -> None:
    await store.reserve("r1", [charge(900_000)], now=0, lease_s=5)
    late = 5 + KEEP_EXPIRED_S + PURGE_DUE_S
    clock.advance(late)
    await store.reserve("r2", [charge(1)], now=late, lease_s=5)  # purges r1, a day and more past its lease
    await store.settle("r1", Amounts(300_000, 5, 1))
    assert await spent(store, late) == 0
