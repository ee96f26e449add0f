"""Budget steps at ``synchronous = NORMAL`` run on the loop's thread and never block it on a lock."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from provmw.stores._sqlite import SqliteDatabase
from provmw.stores.budgets import Amounts, BucketId, Charge, Limits
from provmw.stores.budgets.sqlite import SqliteBudgetStore

CHARGE = Charge(BucketId("global", "*", "total", "total"), Limits(cost_micro_usd=1_000_000), Amounts(900_000, 0, 1))
SCHEMA = "CREATE TABLE IF NOT EXISTS t (x INTEGER);"


def locked(path: Path) -> sqlite3.Connection:
    """Another connection (as another process would) holding the file's write lock."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


async def thread_of_a_step(path: Path, synchronous: str) -> int:
    db = SqliteDatabase(path, SCHEMA, synchronous=synchronous)  # type: ignore[arg-type]
    await db.run(lambda c: None)  # the worker opens the file and writes the schema
    ident = await db.run_inline(lambda c: threading.get_ident())
    db.close()
    return ident


async def test_a_step_at_normal_runs_on_the_loops_thread(tmp_path: Path) -> None:
    assert await thread_of_a_step(tmp_path / "n.db", "NORMAL") == threading.get_ident()


async def test_a_step_at_full_goes_to_the_worker_so_its_sync_never_blocks_the_loop(tmp_path: Path) -> None:
    assert await thread_of_a_step(tmp_path / "f.db", "FULL") != threading.get_ident()


async def test_a_locked_file_leaves_the_loop_free_and_the_step_goes_through_once_it_is_released(
        tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL")
    await store.reserve("first", [CHARGE], now=0, lease_s=60)
    await store.settle("first", Amounts(1, 0, 1))
    holder = locked(tmp_path / "b.db")
    waiting = asyncio.ensure_future(store.reserve("second", [CHARGE], now=0, lease_s=60))
    for _ in range(5):  # the loop keeps turning while the step waits for the lock
        await asyncio.sleep(0)
    assert not waiting.done()
    holder.execute("ROLLBACK")
    assert await waiting is None
    holder.close()
    await store.aclose()


async def test_a_file_locked_past_busy_timeout_is_an_error_as_before(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL", busy_timeout_s=0)
    await store.settle("nothing", Amounts())  # opens the file
    holder = locked(tmp_path / "b.db")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        await store.reserve("r", [CHARGE], now=0, lease_s=60)
    holder.close()
    await store.aclose()



async def test_steps_on_the_loop_leave_checkpoints_to_the_worker_and_the_wal_starts_over(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL")
    commits = 6_000  # each writes at least two 4 KiB pages to the WAL: 49 MB if it never started over
    for i in range(commits // 2):
        await store.reserve(f"r{i}", [CHARGE], now=0, lease_s=60)
        await store.settle(f"r{i}", Amounts(1, 0, 1))
    assert (tmp_path / "b.db-wal").stat().st_size < commits * 2 * 4096 / 2
    await store.aclose()


async def test_a_step_waits_while_the_worker_holds_the_inline_connection_for_a_checkpoint(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL")
    # Opens the file: the first step runs on the worker thread, which a pause does not hold (a
    # settle at NORMAL only journals, so after one alone the reserve below raced the worker).
    await store.reserve("open", [CHARGE], now=0, lease_s=60)
    await store.settle("open", Amounts())
    with store.db._inline.paused():  # what the worker holds while it checkpoints
        waiting = asyncio.ensure_future(store.reserve("r", [CHARGE], now=0, lease_s=60))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not waiting.done()
    assert await waiting is None
    await store.aclose()


async def test_a_checkpoint_is_asked_for_once_per_16_mb_of_wal_not_at_every_look_after(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL", settle_delay_s=60)
    await store.reserve("open", [CHARGE], now=0, lease_s=60)
    asked = []
    checkpoint = store.db._inline._checkpoint

    def counted() -> None:
        asked.append(1)
        checkpoint()

    store.db._inline._checkpoint = counted
    for i in range(6_000):  # about 13 KB of WAL a commit: 78 MB, five 16 MB stretches
        await store.reserve(f"r{i}", [Charge(CHARGE.bucket, CHARGE.limits, Amounts(1, 0, 1))], now=0, lease_s=60)
        await store.settle(f"r{i}", Amounts(1, 0, 1))
    assert 2 <= len(asked) <= 8  # the WAL is cut back when it starts over, so it is not "big" ever after
    await store.aclose()
