"""A settle the budget store cannot take (an outage) is kept and written once the store answers,
before the next call is admitted; past the bound it is dropped, and counted."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from provmw.stores.budgets import Amounts, Charge, Limits
from provmw.stores.budgets.sqlite import SqliteBudgetStore
from provmw.stores.outage import GuardedBudgets
from provmw.testing import FakeClock
from tests.stores.budget_files import BUCKET

LIMIT = Limits(cost_micro_usd=1_000)


def guarded(path: Path, clock: FakeClock, max_kept_settles: int = 100) -> GuardedBudgets:
    return GuardedBudgets(SqliteBudgetStore(path, busy_timeout_s=0.05, clock=clock), max_kept_settles=max_kept_settles)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Another process holds the file's write lock: every step of the store fails meanwhile."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


async def spent(store: GuardedBudgets) -> int:
    return sum(state.spent.cost_micro_usd for state in await store.states(now=0))


async def test_a_settle_that_failed_counts_once_the_store_answers(tmp_path: Path) -> None:
    store = guarded(tmp_path / "b.db", FakeClock(0.0))
    assert await store.reserve("r1", [Charge(BUCKET, LIMIT, Amounts(1_000, 0, 1))], now=0, lease_s=60) is None
    with locked(tmp_path / "b.db"):
        await store.settle("r1", Amounts(400, 5, 1))
    assert await spent(store) == 400
    await store.aclose()


async def test_the_next_call_is_admitted_only_after_what_the_outage_spent(tmp_path: Path) -> None:
    clock = FakeClock(0.0)
    store = guarded(tmp_path / "b.db", clock)
    assert await store.reserve("r1", [Charge(BUCKET, LIMIT, Amounts(1_000, 0, 1))], now=0, lease_s=60) is None
    with locked(tmp_path / "b.db"):
        await store.settle("r1", Amounts(1_000, 5, 1))
    clock.advance(61)  # r1's lease is over: only its settle still holds the limit
    assert await store.reserve("r2", [Charge(BUCKET, LIMIT, Amounts(1, 0, 1))], now=61, lease_s=60) is not None
    await store.aclose()


async def test_past_the_bound_a_failed_settle_is_dropped_and_counted(tmp_path: Path) -> None:
    store = guarded(tmp_path / "b.db", FakeClock(0.0), max_kept_settles=1)
    for rid in ("r1", "r2"):
        assert await store.reserve(rid, [Charge(BUCKET, LIMIT, Amounts(500, 0, 1))], now=0, lease_s=60) is None
    with locked(tmp_path / "b.db"):
        await store.settle("r1", Amounts(100, 5, 1))
        await store.settle("r2", Amounts(200, 5, 1))
    assert (await spent(store), store.kept.dropped) == (100, 1)
    await store.aclose()
