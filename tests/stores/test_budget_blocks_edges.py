"""Blocks of budget at their edges (ADR 0035): two limits on one bucket, long calls, bursts, a full
disk, a close with calls in flight, a settle that fails."""

from __future__ import annotations

import asyncio
import errno
import sqlite3
from pathlib import Path

import pytest

from provmw.stores.budgets import Amounts, Charge, Limits
from provmw.stores.budgets import settles as _settles
from provmw.stores.budgets.blocks import BudgetBlocks
from provmw.stores.budgets.settles import SettleJournal
from provmw.stores.budgets.sqlite import SqliteBudgetStore
from tests.stores.budget_files import BUCKET, DOLLAR, OTHER, A, in_file, reservation_ids


def blocks(path: Path, **options: float) -> BudgetBlocks:
    return BudgetBlocks(SqliteBudgetStore(path, synchronous="NORMAL"), **options)  # type: ignore[arg-type]


# Two limits on one bucket (a cost and a request limit written apart, or a `*` limit and one naming
# the subject) give a call two charges with one bucket key: one charge, with the tighter limits.

async def test_a_call_on_one_bucket_with_two_limits_is_counted_once(tmp_path: Path) -> None:
    store = blocks(tmp_path / "b.db")
    charges = [Charge(BUCKET, DOLLAR, A), Charge(BUCKET, Limits(requests=10_000), A)]
    for i in range(3):
        assert await store.reserve(f"r{i}", charges, now=0, lease_s=60) is None
        await store.settle(f"r{i}", Amounts(400, 5, 1))
    [state] = await store.states(now=0)
    await store.aclose()
    assert state.spent == Amounts(1_200, 15, 3)  # three calls of 400



async def test_a_bucket_with_two_limits_is_never_overspent(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    cost, requests = DOLLAR, Limits(requests=10_000)
    plain = SqliteBudgetStore(path, synchronous="NORMAL")  # the bucket exists, 900_000 spent
    assert await plain.reserve("old", [Charge(BUCKET, cost, Amounts(900_000, 0, 1))], now=0, lease_s=60) is None
    await plain.settle("old", Amounts(900_000, 0, 1))
    await plain.aclose()
    store = blocks(path)
    real = 900_000
    assert await store.reserve("x", [Charge(BUCKET, cost, A), Charge(BUCKET, requests, A)], now=0, lease_s=60) is None
    await store.settle("x", A)
    real += A.cost_micro_usd
    big = Amounts(31_000, 10, 1)  # under 1/32 of the cost limit
    for i in range(10):
        if await store.reserve(f"y{i}", [Charge(BUCKET, cost, big), Charge(BUCKET, requests, big)],
                               now=0, lease_s=60) is None:
            await store.settle(f"y{i}", big)  # each spends its worst case
            real += big.cost_micro_usd
    await store.aclose()
    # As on the plain store, 3 of the 10 fit.
    assert real <= 1_000_000, f"really spent {real} against a limit of 1_000_000"


# A block no call enters any more gives back the room its calls in flight do not hold.

async def test_long_calls_started_a_second_apart_do_not_hold_the_whole_limit(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    mine = blocks(path)
    other = SqliteBudgetStore(path, synchronous="NORMAL")
    limit = Limits(cost_micro_usd=256_000)  # a block: 16 calls of 1_000, 1/16 of the limit
    for i in range(16):  # one long call every two seconds, all still running
        assert await mine.reserve(f"long{i}", [Charge(OTHER, limit, A)], now=2.0 * i, lease_s=60) is None
    in_flight = 16 * A.cost_micro_usd  # 16_000: 1/16 of the limit
    _, held = in_file(path)
    # Another process asks for half the limit: 128_000 + 16_000 <= 256_000, yet it is refused.
    refusal = await other.reserve("half", [Charge(OTHER, limit, Amounts(128_000, 0, 1))], now=33, lease_s=60)
    await mine.aclose()
    await other.aclose()
    assert held <= in_flight + 256_000 // 16, f"the file holds {held} for {in_flight} in flight"
    assert refusal is None, refusal


# A burst waits for the block one of its calls is reserving.

async def test_a_burst_of_64_calls_reserves_a_few_blocks_not_one_each(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    mine = blocks(path)
    other = SqliteBudgetStore(path, synchronous="NORMAL")
    charge = Charge(OTHER, DOLLAR, A)
    refusals = await asyncio.gather(*(mine.reserve(f"c{i}", [charge], now=0, lease_s=60) for i in range(64)))
    assert refusals == [None] * 64
    _, held = in_file(path)
    ids = reservation_ids(path)
    refusal = await other.reserve("o", [Charge(OTHER, DOLLAR, Amounts(500_000, 0, 1))], now=0, lease_s=60)
    await mine.aclose()
    await other.aclose()
    assert len(ids) <= 8, f"{len(ids)} reservations in the file for 64 calls, holding {held}"
    assert refusal is None, refusal  # 64_000 in flight, 500_000 asked: refused


# A journal that cannot start over (no room for a new file) goes on in its old file.

async def test_a_start_over_on_a_full_disk_does_not_fail_a_committed_reserve(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_settles, "_RESET_BYTES", 1)  # every committed file starts over (64 KB in production)
    path = tmp_path / "b.db"
    inner = SqliteBudgetStore(path, synchronous="NORMAL", settle_delay_s=60)
    store = BudgetBlocks(inner)
    big = Charge(OTHER, DOLLAR, Amounts(100_000, 0, 1))  # over 1/32 of the limit: reserved on its own
    assert await store.reserve("small", [Charge(BUCKET, DOLLAR, A)], now=0, lease_s=60) is None
    await store.settle("small", Amounts(400, 5, 1))  # a live block's running total in the journal
    assert await store.reserve("big", [big], now=0, lease_s=60) is None
    await store.settle("big", Amounts(50_000, 0, 1))  # journaled, pending

    def no_room(self: SettleJournal) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(SettleJournal, "_open", no_room)  # the disk is full: no new file
    raised: BaseException | None = None
    try:
        # This reserve commits "big"'s settle, so the journal starts over, with the block's total.
        await store.reserve("next", [big], now=0, lease_s=60)
    except OSError as exc:
        raised = exc
    ids = reservation_ids(path)
    monkeypatch.undo()
    await store.aclose()
    assert raised is None or "next" not in ids, f"reserve raised {raised!r}, yet its reservation is held: {ids}"


# A call still running when the store closes is counted when it settles, as on the plain store.

@pytest.mark.parametrize("with_blocks", [False, True], ids=["plain", "blocks"])
async def test_a_call_that_returns_after_aclose_is_still_counted(tmp_path: Path, with_blocks: bool) -> None:
    path = tmp_path / "b.db"
    inner = SqliteBudgetStore(path, synchronous="NORMAL", settle_delay_s=60)
    store = BudgetBlocks(inner) if with_blocks else inner
    assert await store.reserve("earlier", [Charge(BUCKET, DOLLAR, A)], now=0, lease_s=60) is None
    await store.settle("earlier", Amounts(300, 5, 1))
    assert await store.reserve("late", [Charge(BUCKET, DOLLAR, A)], now=0, lease_s=60) is None
    await store.aclose()  # the manager closes; "late" is still running
    await store.settle("late", Amounts(500, 5, 1))  # it returns: its settle is journaled
    inner._journal.close(committed=False)  # the process exits: its journal is unlocked
    survivor = SqliteBudgetStore(path, synchronous="NORMAL")
    [state] = await survivor.states(now=1)  # replays the journal
    await survivor.aclose()
    assert state.spent.cost_micro_usd == 800


# A block whose settle fails is settled by a later step.

async def test_a_block_whose_settle_failed_is_settled_later(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    inner = SqliteBudgetStore(path, synchronous="NORMAL", settle_delay_s=60, busy_timeout_s=0.05)
    store = BudgetBlocks(inner)
    charge = Charge(BUCKET, DOLLAR, A)
    assert await store.reserve("returned", [charge], now=0, lease_s=60) is None
    await store.settle("returned", Amounts(400, 5, 1))  # returned: its block's total is journaled
    assert await store.reserve("last", [charge], now=0, lease_s=60) is None
    await store.states(now=0)  # closes the block; "last" is still in it
    journal = inner._journal
    inner._journal = SettleJournal(tmp_path / "gone" / "b.db")  # no room for a line
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process writes meanwhile
    await store.settle("last", Amounts(300, 5, 1))  # the block's settle fails: tried again later
    other.execute("ROLLBACK")
    other.close()
    inner._journal = journal  # room again
    # The next steps, a report, and the close: none settles the block.
    assert await store.reserve("after", [Charge(OTHER, DOLLAR, A)], now=1, lease_s=60) is None
    await store.settle("after", Amounts(0, 0, 1))
    await store.states(now=1)
    spent_alive = in_file(path)[0]
    await store.aclose()
    assert spent_alive >= 400, f"the file counts {spent_alive} of the 400 a returned call spent"
