"""Budget stores, memory and SQLite alike: reserve, settle, leases, all-or-nothing."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provmw.stores.budgets import Amounts, BucketId, BudgetStore, Charge, Limits, MemoryBudgetStore
from provmw.stores.budgets.blocks import BudgetBlocks
from provmw.stores.budgets.sqlite import SqliteBudgetStore
from provmw.testing import FakeClock

DAY = BucketId("user", "ada", "day", "2026-11-22", "2026-11-23T00:00:00-08:00")
MONTH = BucketId("tenant", "acme", "month", "2026-11")
DOLLAR = Limits(cost_micro_usd=1_000_000)


def charge(micro_usd: int, bucket: BucketId = DAY, limits: Limits = DOLLAR) -> Charge:
    return Charge(bucket, limits, Amounts(micro_usd, 10, 1))


@pytest.fixture
def clock() -> FakeClock:
    """The store's clock, which its leases go by (ADR 0044); the memory store goes by the ``now`` it is given."""
    return FakeClock(0.0)


@pytest.fixture(params=["memory", "sqlite", "sqlite-normal", "sqlite-blocks"])
async def store(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> AsyncIterator[BudgetStore]:
    # At NORMAL a settle goes to the settle journal and is committed by the next step (ADR 0032);
    # blocks reserve room for many calls at once (ADR 0035).
    made: BudgetStore = MemoryBudgetStore() if request.param == "memory" else SqliteBudgetStore(
        tmp_path / "b.db", synchronous="FULL" if request.param == "sqlite" else "NORMAL", clock=clock)
    if request.param == "sqlite-blocks":
        made = BudgetBlocks(made)  # type: ignore[arg-type]
    yield made
    await made.aclose()


async def held(store: BudgetStore, bucket: BucketId = DAY, now: float = 0.0) -> tuple[int, int]:
    state = next(s for s in await store.states(now=now) if s.bucket == bucket)
    return state.spent.cost_micro_usd, state.reserved.cost_micro_usd


async def test_a_reservation_within_the_limit_is_held(store: BudgetStore) -> None:
    assert await store.reserve("r1", [charge(600_000)], now=0, lease_s=60) is None
    assert await held(store) == (0, 600_000)


async def test_a_reservation_past_the_limit_is_refused_with_the_figures(store: BudgetStore) -> None:
    await store.reserve("r1", [charge(600_000)], now=0, lease_s=60)
    refusal = await store.reserve("r2", [charge(500_000)], now=0, lease_s=60)
    assert refusal is not None
    assert (refusal.bucket, refusal.dimension, refusal.limit, refusal.spent, refusal.reserved) == \
        (DAY, "cost_micro_usd", 1_000_000, 0, 600_000)


async def test_a_reservation_is_all_or_nothing_across_buckets(store: BudgetStore) -> None:
    tight = Limits(requests=0)
    refusal = await store.reserve("r1", [charge(1), charge(1, MONTH, tight)], now=0, lease_s=60)
    assert refusal is not None and refusal.bucket == MONTH
    assert await store.states(now=0) == []


async def test_settling_adds_the_real_amount_and_frees_the_reservation(store: BudgetStore) -> None:
    await store.reserve("r1", [charge(10_000)], now=0, lease_s=60)
    await store.settle("r1", Amounts(6_000, 5, 1))
    assert await held(store) == (6_000, 0)


async def test_settling_twice_counts_once(store: BudgetStore) -> None:
    await store.reserve("r1", [charge(10_000)], now=0, lease_s=60)
    await store.settle("r1", Amounts(6_000, 5, 1))
    await store.settle("r1", Amounts(6_000, 5, 1))
    assert await held(store) == (6_000, 0)


async def test_releasing_frees_everything(store: BudgetStore) -> None:
    await store.reserve("r1", [charge(900_000)], now=0, lease_s=60)
    await store.settle("r1", Amounts())
    assert await held(store) == (0, 0)
    assert await store.reserve("r2", [charge(1_000_000)], now=0, lease_s=60) is None


async def test_an_expired_lease_frees_its_capacity(store: BudgetStore, clock: FakeClock) -> None:
    await store.reserve("r1", [charge(900_000)], now=clock(), lease_s=5)
    clock.advance(4.9)
    assert await store.reserve("r2", [charge(900_000)], now=clock(), lease_s=5) is not None
    clock.advance(0.2)
    assert await store.reserve("r2", [charge(900_000)], now=clock(), lease_s=5) is None


async def test_a_late_settle_counts_once_and_never_goes_negative(store: BudgetStore, clock: FakeClock) -> None:
    await store.reserve("r1", [charge(900_000)], now=clock(), lease_s=5)
    clock.advance(10)
    await store.settle("r1", Amounts(300_000, 5, 1))  # settled after its lease expired
    await store.settle("r1", Amounts(300_000, 5, 1))
    assert await held(store, now=clock()) == (300_000, 0)


async def test_renewing_keeps_a_long_call_reserved(store: BudgetStore, clock: FakeClock) -> None:
    await store.reserve("r1", [charge(900_000)], now=clock(), lease_s=5)
    clock.advance(4)
    await store.renew("r1", now=clock(), lease_s=5)
    clock.advance(4)
    assert await store.reserve("r2", [charge(900_000)], now=clock(), lease_s=5) is not None


async def test_the_sqlite_store_is_shared_by_two_handles_on_one_file(tmp_path: Path) -> None:
    first, second = SqliteBudgetStore(tmp_path / "b.db"), SqliteBudgetStore(tmp_path / "b.db")
    await first.reserve("r1", [charge(900_000)], now=0, lease_s=60)
    assert await second.reserve("r2", [charge(900_000)], now=0, lease_s=60) is not None
    await first.aclose()
    await second.aclose()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 400_000), st.floats(0, 1)), max_size=40))
async def test_spent_plus_reserved_never_passes_the_limit(steps: list[tuple[int, float]]) -> None:
    store = MemoryBudgetStore()
    for i, (reserve, fraction) in enumerate(steps):
        if await store.reserve(f"r{i}", [charge(reserve)], now=0, lease_s=60) is None and i % 2:
            await store.settle(f"r{i}", Amounts(int(reserve * fraction), 1, 1))
        spent, reserved = await held(store) if await store.states(now=0) else (0, 0)
        assert spent + reserved <= 1_000_000


@pytest.mark.parametrize("field", ["cost_micro_usd", "tokens", "requests"])
def test_no_store_can_be_handed_a_negative_amount(field: str) -> None:
    with pytest.raises(ValueError, match=f"never negative: {field}=-1"):
        Amounts(**{field: -1})


async def test_a_budget_store_syncs_each_step_only_when_asked(tmp_path: Path) -> None:
    modes = []
    for synchronous in ("NORMAL", "FULL"):
        store = SqliteBudgetStore(tmp_path / f"{synchronous}.db", synchronous=synchronous)
        modes.append(await store.db.run(lambda c: c.execute("PRAGMA synchronous").fetchone()[0]))
        await store.aclose()
    assert modes == [1, 2]  # SQLite's numbers for NORMAL and FULL


async def test_a_file_made_by_an_earlier_version_keeps_working(tmp_path: Path) -> None:
    earlier = sqlite3.connect(tmp_path / "b.db")
    earlier.executescript(
        "CREATE TABLE budget_reservations (id TEXT NOT NULL, key TEXT NOT NULL, cost_micro_usd INTEGER NOT NULL, "
        "tokens INTEGER NOT NULL, requests INTEGER NOT NULL, expires_at REAL NOT NULL, PRIMARY KEY (id, key));")
    earlier.close()
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL")
    await store.reserve("r1", [charge(600_000)], now=0, lease_s=60)
    await store.settle("r1", Amounts(100_000, 10, 1))
    assert await store.reserve("r2", [charge(900_000)], now=0, lease_s=60) is None
    assert await held(store) == (100_000, 900_000)
    await store.aclose()


def test_a_forked_child_uses_the_file_through_a_thread_and_connections_of_its_own(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL")
    asyncio.run(store.reserve("parent", [charge(1_000)], now=0, lease_s=60))  # opens the parent's
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: its steps would wait for the parent's thread for ever
        signal.alarm(10)

        async def child() -> None:
            assert await store.reserve("child", [charge(2_000)], now=0, lease_s=60) is None
            await store.states(now=0)

        asyncio.run(child())
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert asyncio.run(held(store)) == (0, 3_000)
    asyncio.run(store.aclose())
