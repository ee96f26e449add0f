"""At ``synchronous = NORMAL`` a settle is journaled and committed with the next step (ADR 0032):
never lost to kill -9, never counted twice, never taken from a live process."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

from provmw.stores._sqlite import transaction
from provmw.stores.budgets import Amounts, BucketId, Charge, Limits
from provmw.stores.budgets.settles import SettleJournal
from provmw.stores.budgets.sqlite import SqliteBudgetStore
from tests.stores.budget_files import kill_once_settled

BUCKET = BucketId("global", "*", "total", "total")
CHARGE = Charge(BUCKET, Limits(cost_micro_usd=1_000_000), Amounts(900_000, 0, 1))
SMALL = Charge(BUCKET, Limits(cost_micro_usd=1_000_000), Amounts(10_000, 0, 1))


def committed(path: Path) -> tuple[int, int]:
    """What another connection (another process) reads: the bucket's spend and the reservations left."""
    connection = sqlite3.connect(path)
    try:
        spent = connection.execute("SELECT COALESCE(SUM(cost_micro_usd), 0) FROM budget_buckets").fetchone()[0]
        reservations = connection.execute("SELECT COUNT(*) FROM budget_reservations").fetchone()[0]
    finally:
        connection.close()
    return spent, reservations


def journals(folder: Path) -> list[Path]:
    return sorted(folder.glob("b.db.settles.*"))


async def test_a_settle_is_committed_by_the_next_reserve(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL", settle_delay_s=60)
    await store.reserve("first", [CHARGE], now=0, lease_s=60)
    await store.settle("first", Amounts(1_000, 0, 1))
    assert committed(tmp_path / "b.db") == (0, 1)  # journaled only
    await store.reserve("second", [CHARGE], now=0, lease_s=60)
    assert committed(tmp_path / "b.db") == (1_000, 1)  # the first settled, the second held
    await store.aclose()


async def test_a_settle_with_no_step_after_it_is_committed_within_the_delay(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL", settle_delay_s=0.01)
    await store.reserve("only", [CHARGE], now=0, lease_s=60)
    await store.settle("only", Amounts(1_000, 0, 1))
    for _ in range(200):
        if committed(tmp_path / "b.db") == (1_000, 0):
            break
        await asyncio.sleep(0.01)
    assert committed(tmp_path / "b.db") == (1_000, 0)
    await store.aclose()


async def test_closing_commits_what_is_journaled_and_removes_the_journal(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL", settle_delay_s=60)
    await store.reserve("r", [CHARGE], now=0, lease_s=60)
    await store.settle("r", Amounts(1_000, 0, 1))
    assert len(journals(tmp_path)) == 1
    await store.aclose()
    assert committed(tmp_path / "b.db") == (1_000, 0)
    assert journals(tmp_path) == []


async def test_a_live_processs_journal_is_never_replayed_by_another(tmp_path: Path) -> None:
    mine = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL", settle_delay_s=60)
    other = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL", settle_delay_s=60)
    await mine.reserve("mine", [CHARGE], now=0, lease_s=60)
    await mine.settle("mine", Amounts(1_000, 0, 1))
    # The other handle (as another process would) still sees the reservation held, not yet spent:
    # the worst case is what counts meanwhile, so nothing can be over-spent.
    assert await other.reserve("other", [CHARGE], now=0, lease_s=60) is not None
    assert committed(tmp_path / "b.db") == (0, 1)
    await mine.aclose()
    await other.aclose()


async def test_an_unwritable_journal_commits_the_settle_at_once(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL", settle_delay_s=60)
    await store.reserve("r", [CHARGE], now=0, lease_s=60)
    store._journal = SettleJournal(tmp_path / "gone" / "b.db")  # its folder does not exist
    await store.settle("r", Amounts(1_000, 0, 1))
    assert committed(tmp_path / "b.db") == (1_000, 0)
    await store.aclose()


def test_a_line_cut_by_a_crash_is_not_replayed(tmp_path: Path) -> None:
    (tmp_path / "b.db.settles.dead").write_bytes(b"a 1 0 1\nb 2 0 1\nc 3 0")
    found = SettleJournal(tmp_path / "b.db").orphans()
    assert found.settles == [("a", 1, 0, 1), ("b", 2, 0, 1)]
    found.release()


SETTLER = """
    import asyncio, sys, time
    from provmw.stores.budgets import Amounts, BucketId, Charge, Limits
    from provmw.stores.budgets.sqlite import SqliteBudgetStore
    async def main():
        store = SqliteBudgetStore(sys.argv[1], synchronous="NORMAL", settle_delay_s=3600)
        charge = Charge(BucketId("global", "*", "total", "total"), Limits(cost_micro_usd=1_000_000),
                        Amounts(900_000, 0, 1))
        for rid in ("first", "second"):
            assert await store.reserve(rid, [charge], now=time.time(), lease_s=3600) is None
            await store.settle(rid, Amounts(1_000, 0, 1))  # "first" is committed by the second reserve
        print("settled", flush=True)  # the second call has returned; its settle is only journaled
        await asyncio.sleep(60)
    asyncio.run(main())
"""


async def test_kill_9_after_a_settle_returned_loses_nothing_and_counts_it_once(tmp_path: Path) -> None:
    kill_once_settled(SETTLER, tmp_path / "b.db")
    assert committed(tmp_path / "b.db") == (1_000, 1)  # the second settle is in the dead process's journal
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL")
    # The next step anywhere replays it (both lines: the first, committed already, counts once).
    assert await store.reserve("next", [CHARGE], now=0, lease_s=60) is None
    assert committed(tmp_path / "b.db") == (2_000, 1)
    assert journals(tmp_path) == []  # the dead process's journal is gone once replayed
    await store.aclose()


async def test_a_settle_journaled_while_steps_on_two_threads_commit_is_committed_too(tmp_path: Path) -> None:
    # The worker runs a store's first steps, the loop the later ones: two steps can run the same
    # pending settles, and a settle can be journaled between their commits.
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL", settle_delay_s=60)
    await store.reserve("one", [SMALL], now=0, lease_s=60)
    await store.reserve("two", [SMALL], now=0, lease_s=60)
    await store.settle("one", Amounts(1_000, 0, 1))
    worker = sqlite3.connect(tmp_path / "b.db", isolation_level=None)
    loop = sqlite3.connect(tmp_path / "b.db", isolation_level=None)
    with transaction(worker):
        first = store._apply_pending(worker, None)
    with transaction(loop):
        second = store._apply_pending(loop, None)
    await store.settle("two", Amounts(2_000, 0, 1))
    store._committed(first, None)
    store._committed(second, None)
    worker.close()
    loop.close()
    await store.aclose()
    assert committed(tmp_path / "b.db") == (3_000, 0)


async def test_a_dead_processs_journal_is_replayed_by_a_store_at_full_too(tmp_path: Path) -> None:
    kill_once_settled(SETTLER, tmp_path / "b.db")
    store = SqliteBudgetStore(tmp_path / "b.db")  # restarted with synchronous = "full"
    await store.reserve("next", [SMALL], now=0, lease_s=60)
    assert committed(tmp_path / "b.db")[0] == 2_000
    await store.aclose()
    assert journals(tmp_path) == []


async def test_a_report_counts_what_a_dead_process_journaled(tmp_path: Path) -> None:
    kill_once_settled(SETTLER, tmp_path / "b.db")
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL")
    [state] = await store.states(now=0)
    assert state.spent.cost_micro_usd == 2_000
    await store.aclose()


def test_a_forked_child_journals_in_a_file_of_its_own(tmp_path: Path) -> None:
    journal = SettleJournal(tmp_path / "b.db")
    journal.append("parent", 1, 0, 1)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        journal.append("child", 2, 0, 1)
        os._exit(0)
    os.waitpid(pid, 0)
    contents = sorted(path.read_bytes() for path in journals(tmp_path))
    journal.close(committed=True)
    assert contents == [b"child 2 0 1\n", b"parent 1 0 1\n"]


async def test_a_report_removes_an_empty_journal_a_dead_process_left(tmp_path: Path) -> None:
    (tmp_path / "b.db.settles.dead").write_bytes(b"")
    store = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL")
    await store.states(now=0)
    assert journals(tmp_path) == []
    await store.aclose()
