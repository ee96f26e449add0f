"""Blocks of budget (ADR 0035) when things fail or race: a call committed on its own while its block
is cut, long calls in full blocks, a cancelled close, a block settle that fails, a locked file under
a burst, a loop that ends. A strict budget is never overspent, no returned call's spend is lost,
nothing counts twice."""

from __future__ import annotations

import asyncio
import errno
import sqlite3
import time
from pathlib import Path

import pytest

from provmw.stores.budgets import Amounts, BucketId, Charge, Limits, Refusal
from provmw.stores.budgets import settles as _settles
from provmw.stores.budgets.blocks import BudgetBlocks
from provmw.stores.budgets.sqlite import SqliteBudgetStore
from tests.polling import eventually
from tests.stores.budget_files import BUCKET, DOLLAR, OTHER, A, in_file
from tests.virtual_time import run_virtual

BOB = BucketId("user", "bob", "day", "2026-11-24")


def journals(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.settles.*"))


def no_room(*args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def locked(path: Path) -> sqlite3.Connection:
    """Another process writing: the file's write lock is taken until ROLLBACK."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


class SlowParts(SqliteBudgetStore):
    """The real store, whose ``settle_part`` waits (as it does on a file another process holds: the
    inline step polls, every 50 ms after its first tries) until ``go`` is set."""

    go: asyncio.Event | None = None

    async def settle_part(self, block_id: str, reserved: Amounts, actual: Amounts) -> None:
        if self.go is not None:
            await self.go.wait()
        await super().settle_part(block_id, reserved, actual)


# A call committed on its own (no room for the journal's line) and a cut of its block: never both.

async def test_a_shrink_landing_before_a_settle_part_leaves_a_call_in_flight_unreserved(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    inner = SlowParts(path, synchronous="NORMAL", settle_delay_s=60)
    store = BudgetBlocks(inner)
    limit = Limits(cost_micro_usd=256_000)  # a block: 16 calls of 1_000
    charge = Charge(OTHER, limit, A)
    assert await store.reserve("x", [charge], now=0, lease_s=60) is None
    assert await store.reserve("long", [charge], now=0, lease_s=60) is None  # still running below
    inner.go = asyncio.Event()
    inner.running = no_room  # type: ignore[assignment,method-assign]  # the disk is full: x's total cannot be journaled
    settling = asyncio.create_task(store.settle("x", Amounts(1_000, 0, 1)))  # -> settle_part, waiting for the file
    await asyncio.sleep(0.01)
    await store.states(now=0)  # a report (or the idle timer) closes the block: cut to what "long" holds
    inner.go.set()
    await settling
    del inner.running
    spent, held = in_file(path)
    # "long" is in flight with a worst case of 1_000: the file must hold it.
    other = SqliteBudgetStore(path, synchronous="NORMAL")
    rest = Amounts(256_000 - spent - held, 0, 1)
    admitted = await other.reserve("o", [Charge(OTHER, limit, rest)], now=0, lease_s=60) is None
    if admitted:
        await other.settle("o", rest)  # it spends what it was given
    await store.settle("long", Amounts(1_000, 0, 1))  # so does "long": its worst case
    await other.aclose()
    await store.aclose()
    total, _ = in_file(path)
    assert held >= 1_000 and total <= 256_000, \
        f"the file held {held} for a call in flight whose worst case is 1_000; spent {total} of a 256_000 limit"


# A closed block is cut again as its calls end: one long call does not pin a whole block.

async def test_blocks_closed_full_are_pinned_whole_by_one_long_call_each(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    mine = BudgetBlocks(SqliteBudgetStore(path, synchronous="NORMAL"), max_age_s=0.05)
    other = SqliteBudgetStore(path, synchronous="NORMAL")
    limit = Limits(cost_micro_usd=256_000)  # a block: 16 calls of 1_000, 1/16 of the limit
    charge = Charge(OTHER, limit, A)
    shorts: list[str] = []
    for r in range(16):  # c=16: every block fills with 1 long call and 15 short ones
        # The next long call finds the block full: it closes it (less than a quarter left: no cut).
        assert await mine.reserve(f"long{r}", [charge], now=0, lease_s=60) is None
        for rid in shorts:  # the short calls of the closed block return, having spent a tenth of their worst case
            await mine.settle(rid, Amounts(100, 0, 1))
        shorts = [f"short{r}-{i}" for i in range(15)]
        for rid in shorts:
            assert await mine.reserve(rid, [charge], now=0, lease_s=60) is None
    for rid in shorts:
        await mine.settle(rid, Amounts(100, 0, 1))
    # 16 long calls in flight (16_000), 240 short ones spent 24_000, one block open (at most 16_000).
    needs = 16 * 1_000 + 240 * 100 + 256_000 // 16
    # A while after they closed, the blocks with a long call in them are cut down.
    held = await eventually(lambda: in_file(path)[1], lambda held: held <= needs)
    refusal = await other.reserve("half", [Charge(OTHER, limit, Amounts(128_000, 0, 1))], now=0, lease_s=60)
    await mine.aclose()
    await other.aclose()
    assert held <= needs, f"the file holds {held} where the calls need at most {needs}"
    assert refusal is None, refusal  # 56_000 needed + 128_000 asked <= 256_000


# A close cancelled while it cuts a block still settles the blocks it closed.

async def test_a_call_cancelled_while_it_cuts_a_block_leaves_another_block_never_settled(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    store = BudgetBlocks(SqliteBudgetStore(path, synchronous="NORMAL", settle_delay_s=60))
    assert await store.reserve("long", [Charge(BUCKET, DOLLAR, A)], now=0, lease_s=60) is None
    assert await store.reserve("done", [Charge(OTHER, DOLLAR, A)], now=0, lease_s=60) is None
    await store.settle("done", Amounts(400, 5, 1))  # returned: its block's total is journaled
    writer = locked(path)  # another process writes a moment: the cut waits for the file
    # A call on both buckets, 2 s later: both blocks are old. BUCKET's ("long" in it) is cut, OTHER's settled.
    call = asyncio.create_task(store.reserve("next", [Charge(BUCKET, DOLLAR, A), Charge(OTHER, DOLLAR, A)],
                                             now=2, lease_s=60))
    await asyncio.sleep(0.05)
    call.cancel()  # the caller gives up (a timeout, a client gone)
    with pytest.raises(asyncio.CancelledError):
        await call
    writer.execute("ROLLBACK")
    writer.close()
    await store.settle("long", Amounts(300, 5, 1))
    await store.states(now=3)
    await store.aclose()
    spent, held = in_file(path)
    assert (spent, held) == (700, 0), f"after the close the file counts {spent} spent and holds {held}"


# A block whose settle failed is settled by the close and by a report; its total stays journaled.

async def test_aclose_settles_a_block_whose_settle_failed(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    inner = SqliteBudgetStore(path, synchronous="NORMAL", settle_delay_s=60, busy_timeout_s=0.05)
    store = BudgetBlocks(inner)
    charge = Charge(BUCKET, DOLLAR, A)
    assert await store.reserve("a", [charge], now=0, lease_s=60) is None
    await store.settle("a", Amounts(400, 5, 1))  # returned: its block's total is journaled
    assert await store.reserve("b", [charge], now=0, lease_s=60) is None
    await store.states(now=0)  # closes the block; "b" is still in it
    inner._journal._write = no_room  # type: ignore[method-assign,assignment]  # the disk is full a moment
    writer = locked(path)  # and another process writes: the block's settle fails
    await store.settle("b", Amounts(300, 5, 1))  # returned
    writer.execute("ROLLBACK")
    writer.close()
    del inner._journal._write  # room again
    await store.aclose()  # the manager closes (the process then exits)
    spent, _ = in_file(path)
    assert spent == 700, f"the file counts {spent} of 700 two returned calls spent; journals left: {journals(path)}"


async def test_a_report_settles_a_block_whose_settle_failed(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    inner = SqliteBudgetStore(path, synchronous="NORMAL", settle_delay_s=60, busy_timeout_s=0.05)
    store = BudgetBlocks(inner)
    charge = Charge(BUCKET, DOLLAR, A)
    assert await store.reserve("a", [charge], now=0, lease_s=60) is None
    await store.settle("a", Amounts(400, 5, 1))
    assert await store.reserve("b", [charge], now=0, lease_s=60) is None
    await store.states(now=0)  # closes the block; "b" is still in it
    inner._journal._write = no_room  # type: ignore[method-assign,assignment]
    writer = locked(path)
    await store.settle("b", Amounts(300, 5, 1))  # the block's settle fails
    writer.execute("ROLLBACK")
    writer.close()
    del inner._journal._write
    [state] = await store.states(now=1)  # ADR 0035: "tried again by ... states()"
    spent, _ = in_file(path)
    await store.aclose()
    assert state.spent.cost_micro_usd == 700  # the report adds the block's total itself (as_calls) ...
    assert spent == 700, f"... but the file, which other processes read, counts {spent}"


# A journal that starts over keeps the total of a block whose settle failed.

async def test_a_journal_that_starts_over_keeps_a_block_whose_settle_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_settles, "_RESET_BYTES", 1)  # every committed file starts over (64 KB in production)
    path = tmp_path / "b.db"
    inner = SqliteBudgetStore(path, synchronous="NORMAL", settle_delay_s=60, busy_timeout_s=0.05)
    store = BudgetBlocks(inner)
    charge = Charge(BUCKET, DOLLAR, A)
    big = Charge(OTHER, DOLLAR, Amounts(100_000, 0, 1))  # over 1/32 of the limit: reserved on its own
    assert await store.reserve("a", [charge], now=0, lease_s=60) is None
    await store.settle("a", Amounts(400, 5, 1))  # returned: its block's total is journaled
    assert await store.reserve("b", [charge], now=0, lease_s=60) is None
    assert await store.reserve("big", [big], now=0, lease_s=60) is None
    await store.settle("big", Amounts(50_000, 0, 1))  # journaled, pending
    await store.states(now=0)  # commits "big"; closes the block, "b" still in it
    assert await store.reserve("big2", [big], now=0, lease_s=60) is None
    await store.settle("big2", Amounts(50_000, 0, 1))  # journaled, pending
    inner._journal._write = no_room  # type: ignore[method-assign,assignment]
    writer = locked(path)
    await store.settle("b", Amounts(300, 5, 1))  # returned; the block's settle fails
    writer.execute("ROLLBACK")
    writer.close()
    del inner._journal._write
    # The next step commits "big2": every settle committed, the journal starts over.
    assert await store.reserve("big3", [big], now=1, lease_s=60) is None
    inner._journal.close(committed=False)  # kill -9 now: the journal is unlocked, as the process's death does
    survivor = SqliteBudgetStore(path, synchronous="NORMAL")
    states = {s.bucket: s for s in await survivor.states(now=1)}  # replays the dead process's journal
    await survivor.aclose()
    spent = states[BUCKET].spent.cost_micro_usd
    await store.aclose()
    # "b"'s 300 is lost as on the plain store (no room for its line, and the file locked); "a"'s 400
    # was journaled when "a" returned, and the plain store would have committed it long since.
    assert spent >= 400, f"after kill -9 the file counts {spent} of the 400 journaled for a returned call"


# A burst on a file another process holds fails within one busy timeout, as the plain store's calls.

@pytest.mark.parametrize("with_blocks", [False, True], ids=["plain", "blocks"])
def test_a_burst_on_a_locked_file_fails_within_one_busy_timeout(tmp_path: Path, with_blocks: bool) -> None:
    path = tmp_path / "b.db"
    inner = SqliteBudgetStore(path, synchronous="NORMAL", busy_timeout_s=0.2)
    store = BudgetBlocks(inner) if with_blocks else inner

    async def burst() -> tuple[float, list[Refusal | BaseException | None]]:
        """The 8 calls' outcomes, and how long they took by the loop's (virtual) clock."""
        assert await store.reserve("warm", [Charge(BUCKET, DOLLAR, A)], now=0, lease_s=60) is None  # file open
        await store.settle("warm", A)
        writer = locked(path)
        started = asyncio.get_running_loop().time()
        results = await asyncio.gather(*(store.reserve(f"c{i}", [Charge(OTHER, DOLLAR, A)], now=0, lease_s=60)
                                         for i in range(8)), return_exceptions=True)
        elapsed = asyncio.get_running_loop().time() - started
        writer.execute("ROLLBACK")
        writer.close()
        await store.aclose()
        return elapsed, results

    # On virtual time (the busy wait paces itself on the loop's clock): one timeout, not eight in a row.
    elapsed, results = run_virtual(burst())
    assert all(isinstance(r, sqlite3.OperationalError) for r in results), results
    assert elapsed <= 0.2, f"8 calls on a file locked past the 0.2 s busy timeout failed after {elapsed:.2f} s"


# A block of a loop that ended (asyncio.run per call) closes at the process's next step.

@pytest.mark.parametrize("with_blocks", [False, True], ids=["plain", "blocks"])
def test_a_call_in_a_loop_that_ended_is_counted_once_the_lease_is_over(tmp_path: Path, with_blocks: bool,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "b.db"
    inner = SqliteBudgetStore(path, synchronous="NORMAL")
    store = BudgetBlocks(inner) if with_blocks else inner

    async def call(rid: str, bucket: BucketId, now: float) -> None:
        assert await store.reserve(rid, [Charge(bucket, DOLLAR, A)], now=now, lease_s=60) is None
        await store.settle(rid, Amounts(400, 5, 1))

    asyncio.run(call("ada's", BUCKET, 0))  # one loop per request
    real = time.monotonic
    monkeypatch.setattr(time, "monotonic", lambda: real() + 1.2)  # past the block's age, with no wait
    asyncio.run(call("bob's", BOB, 100))  # the next request, another user's

    async def report() -> int:  # another process, after the first call's lease
        other = SqliteBudgetStore(path, synchronous="NORMAL")
        states = {s.bucket: s for s in await other.states(now=100)}
        await other.aclose()
        return states[BUCKET].spent.cost_micro_usd + states[BUCKET].reserved.cost_micro_usd

    counted = asyncio.run(report())
    asyncio.run(store.aclose())
    assert counted >= 400, f"another process counts {counted} of the 400 ada's returned call spent"
