"""The SQLite budget store, pinned where the mutation run found it unchecked (docs/testing.md)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from provmw.stores.budgets import Amounts
from provmw.stores.budgets.sqlite import SqliteBudgetStore
from provmw.testing import FakeClock
from tests.stores.test_settle_journal import CHARGE, SMALL, committed, journals
from tests.virtual_time import run_virtual


def test_a_live_blocks_running_total_is_journaled_as_its_settle(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL")
    store.running("block-1", Amounts(7, 3, 2))
    [journal] = journals(tmp_path)
    assert journal.read_bytes() == b"block-1 7 3 2\n"  # what a replay settles should this process die
    asyncio.run(store.aclose())


def test_a_delayed_commit_that_finds_the_file_locked_is_tried_again(tmp_path: Path) -> None:
    path = tmp_path / "b.db"

    async def settle_while_locked() -> tuple[int, int]:
        store = SqliteBudgetStore(path, synchronous="NORMAL", settle_delay_s=1.0, busy_timeout_s=0.01)
        await store.reserve("r", [CHARGE], now=0, lease_s=60)
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        await store.settle("r", Amounts(1_000, 0, 1))  # journaled; its commit is due in a second
        await asyncio.sleep(1.5)  # (the loop's seconds) the commit ran, and found the file locked
        holder.close()
        await asyncio.sleep(1.5)  # the next try commits it, with no other step to carry it
        spent = committed(path)
        await store.aclose()
        return spent

    assert run_virtual(settle_while_locked()) == (1_000, 0)


def test_a_settle_in_a_new_event_loop_is_committed_by_that_loops_timer(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    store = SqliteBudgetStore(path, synchronous="NORMAL", settle_delay_s=1.0)

    async def first_loop() -> None:  # its commit timer is armed, and the loop closes before it fires
        await store.reserve("a", [CHARGE], now=0, lease_s=60)
        await store.reserve("b", [SMALL], now=0, lease_s=60)
        await store.settle("a", Amounts(1_000, 0, 1))

    async def second_loop() -> tuple[int, int]:
        await store.settle("b", Amounts(500, 0, 1))
        await asyncio.sleep(1.5)  # (the loop's seconds) past the delay: this loop's timer has committed both
        return committed(path)

    run_virtual(first_loop())
    assert run_virtual(second_loop()) == (1_500, 0)
    asyncio.run(store.aclose())


def spent(path: Path) -> int:
    return committed(path)[0]


async def test_expired_reservations_are_purged_an_hour_after_the_last_purge_to_the_second(tmp_path: Path) -> None:
    clock = FakeClock(0.0)
    store = SqliteBudgetStore(tmp_path / "b.db", clock=clock)
    await store.reserve("old", [SMALL], now=0, lease_s=1)  # a purge runs now; "old" expires at 1
    clock.now = 86_402.0 - 3_600.0
    await store.reserve("x", [SMALL], now=0, lease_s=60)  # the hourly purge: "old" is within its grace
    clock.now = 86_402.0
    await store.reserve("y", [SMALL], now=0, lease_s=60)  # an hour later to the second: purged now
    await store.settle("old", Amounts(1_000, 0, 1))
    assert spent(tmp_path / "b.db") == 0
    await store.aclose()


async def test_a_dead_processs_settles_are_replayed_a_quarter_lease_after_the_last_look(tmp_path: Path) -> None:
    clock = FakeClock(0.0)
    store = SqliteBudgetStore(tmp_path / "b.db", clock=clock)
    await store.reserve("r", [SMALL], now=0, lease_s=60)  # looks for dead journals now: none
    (tmp_path / "b.db.settles.dead").write_bytes(b"r 1000 0 1\n")  # the journal a process left when it died
    clock.now = 14.0
    await store.reserve("early", [SMALL], now=0, lease_s=60)
    assert spent(tmp_path / "b.db") == 0  # not looked for again within a quarter lease
    clock.now = 15.0
    await store.reserve("due", [SMALL], now=0, lease_s=60)
    assert spent(tmp_path / "b.db") == 1_000
    await store.aclose()


async def test_a_reservation_of_no_charges_is_granted(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db")
    assert await store.reserve("nothing", [], now=0, lease_s=60) is None
    await store.aclose()


async def test_a_block_settled_at_once_leaves_no_journal_for_a_replay_to_count_again(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db")  # FULL: a settle is committed before it returns
    await store.reserve("block-1", [SMALL], now=0, lease_s=60)
    store.running("block-1", Amounts(7, 0, 1))
    await store.settle("block-1", Amounts(7, 0, 1))
    await store.aclose()
    assert journals(tmp_path) == []


async def test_a_settle_journal_past_64_kib_starts_over_once_every_line_is_committed(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL", settle_delay_s=60)
    for i in range(70):  # ids of a thousand characters: seventy settles write some 70 KiB of lines
        rid = f"{i:04}" + "r" * 1_000
        await store.reserve(rid, [SMALL], now=0, lease_s=60)  # commits the settle journaled before
        await store.settle(rid, Amounts(1, 0, 1))
    await store.flush()
    [journal] = journals(tmp_path)
    assert journal.stat().st_size < 64 * 1024
    await store.aclose()


def pragma(store: SqliteBudgetStore, name: str) -> int:
    async def read() -> int:
        return int(await store.db.run(lambda c: c.execute(f"PRAGMA {name}").fetchone()[0]))

    return asyncio.run(read())


def test_a_store_waits_five_seconds_for_a_locked_file_by_default(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db")
    assert pragma(store, "busy_timeout") == 5_000
    asyncio.run(store.aclose())


def test_a_store_syncs_every_step_by_default(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db")
    assert pragma(store, "synchronous") == 2  # FULL
    asyncio.run(store.aclose())


def test_a_journaled_settle_is_committed_a_fiftieth_of_a_second_later_by_default(tmp_path: Path) -> None:
    async def settled() -> tuple[int, int]:
        store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL")
        await store.reserve("r", [CHARGE], now=0, lease_s=60)
        await store.settle("r", Amounts(1_000, 0, 1))
        await asyncio.sleep(0.05)  # (the loop's seconds) past the default delay of 0.02 s
        spent = committed(tmp_path / "b.db")
        await store.aclose()
        return spent

    assert run_virtual(settled()) == (1_000, 0)


async def test_a_settle_that_close_cannot_commit_keeps_its_journal_for_the_next_replay(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL", settle_delay_s=60, busy_timeout_s=0.01)
    await store.reserve("r", [CHARGE], now=0, lease_s=60)
    holder = sqlite3.connect(tmp_path / "b.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    await store.settle("r", Amounts(1_000, 0, 1))  # journaled; its commit finds the file locked
    with pytest.raises(sqlite3.OperationalError):
        await store.aclose()
    holder.close()
    [journal] = journals(tmp_path)
    assert journal.read_bytes() == b"r 1000 0 1\n"
