"""Clock skew: a process whose clock is ahead (or behind) never admits past a limit, because leases
expire by the store's clock (the host's, read inside the transaction), not by the caller's ``now``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from provmw.stores.budgets import Amounts, BudgetStore, Charge, Limits
from provmw.stores.budgets.blocks import BudgetBlocks
from provmw.stores.budgets.sqlite import SqliteBudgetStore
from provmw.testing import FakeClock
from tests.stores.budget_files import BUCKET

TWENTY = Limits(requests=20)


async def admitted(store: BudgetStore, name: str, now: float, calls: int = 20) -> int:
    """How many of ``calls`` one-request calls reserve (and stay in flight) at the caller's ``now``."""
    charges = [Charge(BUCKET, TWENTY, Amounts(0, 0, 1))]
    return sum([await store.reserve(f"{name}{i}", charges, now=now, lease_s=60) is None for i in range(calls)])


@pytest.mark.parametrize("skew_s", [120.0, -120.0], ids=["ahead", "behind"])
@pytest.mark.parametrize("kind", ["FULL", "NORMAL", "blocks"])
async def test_a_skewed_process_sharing_the_file_admits_no_more_than_the_limit(
        tmp_path: Path, kind: str, skew_s: float) -> None:
    def handle() -> BudgetStore:
        store = SqliteBudgetStore(tmp_path / "b.db", synchronous="FULL" if kind == "FULL" else "NORMAL")
        return BudgetBlocks(store) if kind == "blocks" else store

    right, skewed = handle(), handle()
    now = time.time()
    # The one whose leases the other would take for expired reserves first.
    first, second = (right, skewed) if skew_s > 0 else (skewed, right)
    total = await admitted(first, "first", now if first is right else now + skew_s)
    total += await admitted(second, "second", now if second is right else now + skew_s)
    await right.aclose()
    await skewed.aclose()
    assert total == 20, f"{total} calls admitted under max_requests = 20"


async def test_a_lease_expires_by_the_store_s_clock_whatever_the_caller_says(tmp_path: Path) -> None:
    clock = FakeClock(0.0)
    store = SqliteBudgetStore(tmp_path / "b.db", clock=clock)
    assert await admitted(store, "first", now=0.0) == 20
    assert await admitted(store, "early", now=1_000.0, calls=1) == 0  # the caller is 1,000 s ahead
    clock.advance(61)
    assert await admitted(store, "late", now=0.0, calls=1) == 1  # and now 61 s behind
    await store.aclose()
