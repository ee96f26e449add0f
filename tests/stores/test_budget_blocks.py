"""Blocks of budget (ADR 0035): one transaction reserves room for many calls of a process, another
process sees the block as held, and a process killed with blocks open loses none of their spend."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from provmw.stores.budgets import Amounts, BucketId, Charge, Limits, Refusal
from provmw.stores.budgets.blocks import BudgetBlocks
from provmw.stores.budgets.settles import SettleJournal, merged
from provmw.stores.budgets.sqlite import SqliteBudgetStore
from tests.polling import eventually
from tests.stores.budget_files import BUCKET, DOLLAR, OTHER, in_file, kill_once_settled


def small(micro_usd: int = 1_000, bucket: BucketId = BUCKET, limits: Limits = DOLLAR) -> Charge:
    return Charge(bucket, limits, Amounts(micro_usd, 10, 1))


class Counting(SqliteBudgetStore):
    """The real store, counting the reservations it is asked for."""

    reserves = 0

    async def reserve(self, reservation_id: str, charges: Sequence[Charge], *, now: float,
                      lease_s: float) -> Refusal | None:
        self.reserves += 1
        return await super().reserve(reservation_id, charges, now=now, lease_s=lease_s)


async def calls(store: BudgetBlocks, count: int, charge: Charge, spent: int, *, first: int = 0) -> int:
    """Reserve and settle ``count`` calls; how many were refused."""
    refused = 0
    for i in range(first, first + count):
        if await store.reserve(f"c{i}", [charge], now=0, lease_s=60) is not None:
            refused += 1
            continue
        await store.settle(f"c{i}", Amounts(spent, 5, 1))
    return refused


async def test_sixteen_calls_take_one_reservation_in_the_file(tmp_path: Path) -> None:
    inner = Counting(tmp_path / "b.db", synchronous="NORMAL")
    store = BudgetBlocks(inner, calls_per_block=16)
    assert await calls(store, 32, small(), 600) == 0
    assert inner.reserves == 2
    await store.aclose()


async def test_what_the_calls_spent_is_in_the_file_once_the_blocks_settle(tmp_path: Path) -> None:
    store = BudgetBlocks(SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL"))
    await calls(store, 40, small(), 600)
    [state] = await store.states(now=0)
    assert (state.spent, state.reserved) == (Amounts(24_000, 200, 40), Amounts())
    await store.aclose()
    assert in_file(tmp_path / "b.db") == (24_000, 0)


async def test_another_process_sees_a_block_as_held(tmp_path: Path) -> None:
    mine = BudgetBlocks(SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL"))
    other = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL")
    assert await mine.reserve("r", [small(1_000)], now=0, lease_s=60) is None
    assert in_file(tmp_path / "b.db") == (0, 16_000)
    refusal = await other.reserve("o", [small(990_000)], now=0, lease_s=60)
    assert refusal is not None and refusal.reserved == 16_000
    await mine.settle("r", Amounts(700, 5, 1))
    await mine.states(now=0)  # closes the block: its room left is free again
    assert await other.reserve("o", [small(990_000)], now=0, lease_s=60) is None
    await mine.aclose()
    await other.aclose()


async def test_a_call_over_a_sixteenth_of_a_limit_reserves_on_its_own(tmp_path: Path) -> None:
    store = BudgetBlocks(SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL"))
    assert await store.reserve("r", [small(62_501)], now=0, lease_s=60) is None
    assert in_file(tmp_path / "b.db") == (0, 62_501)
    await store.aclose()


async def test_near_the_limit_calls_go_one_by_one_and_reach_it_exactly(tmp_path: Path) -> None:
    store = BudgetBlocks(SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL"))
    hundred = Limits(requests=100)
    assert await calls(store, 100, small(0, limits=hundred), 0) == 0
    assert await calls(store, 1, small(0, limits=hundred), 0, first=100) == 1
    [state] = await store.states(now=0)
    assert state.spent.requests == 100
    await store.aclose()


async def test_a_refused_call_takes_no_block(tmp_path: Path) -> None:
    store = BudgetBlocks(SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL"))
    refusal = await store.reserve("r", [small(1), small(1, OTHER, Limits(requests=0))], now=0, lease_s=60)
    assert refusal is not None and refusal.bucket == OTHER
    assert await store.states(now=0) == []
    await store.aclose()


async def test_a_call_on_two_buckets_settles_in_both(tmp_path: Path) -> None:
    store = BudgetBlocks(SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL"))
    assert await store.reserve("r", [small(1_000), small(1_000, OTHER)], now=0, lease_s=60) is None
    await store.settle("r", Amounts(300, 5, 1))
    assert sorted(s.spent.cost_micro_usd for s in await store.states(now=0)) == [300, 300]
    await store.aclose()


async def test_settling_a_call_twice_counts_it_once(tmp_path: Path) -> None:
    store = BudgetBlocks(SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL"))
    await store.reserve("r", [small()], now=0, lease_s=60)
    await store.settle("r", Amounts(300, 5, 1))
    await store.settle("r", Amounts(300, 5, 1))
    [state] = await store.states(now=0)
    assert state.spent.cost_micro_usd == 300
    await store.aclose()


async def test_a_report_counts_a_block_still_in_flight_as_its_calls(tmp_path: Path) -> None:
    store = BudgetBlocks(SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL"))
    await store.reserve("done", [small(1_000)], now=0, lease_s=60)
    await store.settle("done", Amounts(400, 5, 1))
    await store.reserve("running", [small(1_000)], now=0, lease_s=60)
    [state] = await store.states(now=0)
    assert (state.spent.cost_micro_usd, state.reserved.cost_micro_usd) == (400, 1_000)
    await store.settle("running", Amounts(500, 5, 1))
    [state] = await store.states(now=0)
    assert (state.spent.cost_micro_usd, state.reserved.cost_micro_usd) == (900, 0)
    await store.aclose()


async def test_an_unwritable_journal_commits_the_call_on_its_own(tmp_path: Path) -> None:
    inner = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL", settle_delay_s=60)
    store = BudgetBlocks(inner)
    await store.reserve("a", [small(1_000)], now=0, lease_s=60)
    await store.reserve("b", [small(1_000)], now=0, lease_s=60)
    inner._journal = SettleJournal(tmp_path / "gone" / "b.db")  # its folder does not exist
    await store.settle("a", Amounts(400, 5, 1))
    assert in_file(tmp_path / "b.db") == (400, 15_000)  # committed, and out of the block
    inner._journal = SettleJournal(tmp_path / "b.db")
    await store.settle("b", Amounts(500, 5, 1))
    await store.aclose()
    assert in_file(tmp_path / "b.db") == (900, 0)


def test_a_journal_that_starts_over_keeps_the_live_blocks_totals(tmp_path: Path) -> None:
    journal = SettleJournal(tmp_path / "b.db")
    journal.running("block-live", 7, 1, 1)
    for i in range(8_000):  # past the size at which a committed file starts over
        journal.append(f"r{i}", 1, 0, 1)
    journal.running("block-live", 9, 2, 2)
    journal.committed()
    [path] = tmp_path.glob("b.db.settles.*")
    assert path.read_bytes() == b"block-live 9 2 2\n"
    journal.close(committed=False)


def test_a_replay_counts_a_blocks_largest_total_once(tmp_path: Path) -> None:
    (tmp_path / "b.db.settles.dead").write_bytes(b"block-x 5 1 1\nr 2 0 1\nblock-x 9 2 2\nblock-x 7 1 1\n")
    found = SettleJournal(tmp_path / "b.db").orphans()
    assert sorted(merged(found.settles)) == [("block-x", 9, 2, 2), ("r", 2, 0, 1)]
    found.release()


BLOCKS = """
    import asyncio, sys
    from provmw.stores.budgets.blocks import BudgetBlocks
    from provmw.stores.budgets import Amounts, BucketId, Charge, Limits
    from provmw.stores.budgets.sqlite import SqliteBudgetStore
    async def main():
        store = BudgetBlocks(SqliteBudgetStore(sys.argv[1], synchronous="NORMAL", settle_delay_s=3600),
                             max_age_s=3600)
        charge = Charge(BucketId("global", "*", "total", "total"), Limits(cost_micro_usd=1_000_000),
                        Amounts(1_000, 0, 1))
        for i in range(20):  # one block full and settled, a second open
            assert await store.reserve(f"c{i}", [charge], now=0, lease_s=3600) is None
            await store.settle(f"c{i}", Amounts(100, 0, 1))
        assert await store.reserve("running", [charge], now=0, lease_s=3600) is None
        print("settled", flush=True)
        await asyncio.sleep(60)
    asyncio.run(main())
"""


async def test_kill_9_with_a_block_open_loses_none_of_its_calls(tmp_path: Path) -> None:
    kill_once_settled(BLOCKS, tmp_path / "b.db")
    survivor = SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL")
    [state] = await survivor.states(now=0)  # replays the dead process's journal
    # Every call that returned counts; the open block settles with them, its room free at once.
    assert (state.spent.cost_micro_usd, state.reserved.cost_micro_usd) == (2_000, 0)
    await survivor.aclose()


def test_a_forked_child_takes_no_room_from_its_parents_block(tmp_path: Path) -> None:
    store = BudgetBlocks(SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL"))
    asyncio.run(store.reserve("parent", [small()], now=0, lease_s=60))
    pid = os.fork()
    if pid == 0:  # the child: its first call reserves a block of its own
        async def child() -> None:
            await store.reserve("child", [small()], now=0, lease_s=60)
        asyncio.run(child())
        os._exit(0)
    os.waitpid(pid, 0)
    assert in_file(tmp_path / "b.db") == (0, 32_000)
    asyncio.run(store.aclose())


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(1, 40_000), st.floats(0, 1)), max_size=60))
async def test_spent_plus_held_in_the_file_never_passes_the_limit(steps: list[tuple[int, int, float]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "b.db"
        handles = [BudgetBlocks(SqliteBudgetStore(path, synchronous="NORMAL")) for _ in range(2)]
        settled = 0
        running: list[tuple[BudgetBlocks, str]] = []  # every third call is still running
        for i, (which, amount, fraction) in enumerate(steps):
            if await handles[which].reserve(f"r{i}", [small(amount)], now=0, lease_s=60) is None:
                if i % 3 == 0:
                    running.append((handles[which], f"r{i}"))
                    continue
                spent = int(amount * fraction)
                await handles[which].settle(f"r{i}", Amounts(spent, 0, 1))
                settled += spent
            assert sum(in_file(path)) <= 1_000_000
        for handle, rid in running:  # they fail: nothing spent
            await handle.settle(rid, Amounts())
        for handle in handles:
            await handle.aclose()
        assert not steps or in_file(path)[0] == settled


async def test_an_idle_block_settles_within_its_age(tmp_path: Path) -> None:
    store = BudgetBlocks(SqliteBudgetStore(tmp_path / "b.db", synchronous="NORMAL", settle_delay_s=0.01),
                         max_age_s=0.02)
    await store.reserve("r", [small(1_000)], now=0, lease_s=60)
    await store.settle("r", Amounts(400, 5, 1))
    assert await eventually(lambda: in_file(tmp_path / "b.db"), lambda found: found == (400, 0)) == (400, 0)
    await store.aclose()
