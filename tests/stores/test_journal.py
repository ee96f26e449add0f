"""The usage journal: nothing lost while the store fails, nothing written twice after."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provmw.errors import UsageLedgerUnavailableError
from provmw.stores.usage import MemoryUsageStore, SqliteUsageStore
from provmw.stores.usage.journal import UsageJournal
from provmw.stores.usage.spill import SpillFile
from tests.stores.test_usage_store import record


class LockedLedger:
    """A ledger file another connection holds an exclusive lock on: every write fails until
    ``unlock``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        SqliteUsageStore(path).db.run_sync(lambda c: None)  # create the schema
        self._holder = sqlite3.connect(path, isolation_level=None)
        self._holder.execute("BEGIN EXCLUSIVE")

    def store(self) -> SqliteUsageStore:
        return SqliteUsageStore(self.path, busy_timeout_s=0.01)

    def unlock(self) -> None:
        self._holder.close()


def spilled_keys(ledger: Path) -> list[tuple[str, int]]:
    """The keys in the spill file beside ``ledger``, in the order they were spilled."""
    lines = Path(f"{ledger}.spill").read_text().splitlines()
    return [(value["call_id"], value["attempt"]) for value in map(json.loads, lines)]


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[LockedLedger]:
    ledger = LockedLedger(tmp_path / "ledger.db")
    yield ledger
    ledger.unlock()


async def test_a_durable_record_is_in_the_store() -> None:
    journal = UsageJournal(MemoryUsageStore())
    assert await journal.durable(record("a")) == "stored"
    assert journal.pending == 0
    assert len(await journal.store.records()) == 1


async def test_recording_a_key_twice_keeps_one() -> None:
    journal = UsageJournal(MemoryUsageStore())
    journal.record(record("a"))
    journal.record(record("a"))
    await journal.flush()
    assert len(await journal.store.records()) == 1


async def test_waiting_on_a_record_queued_unwaited_gets_its_outcome() -> None:
    journal = UsageJournal(MemoryUsageStore())
    journal.record(record("a"))
    assert await journal.durable(record("a")) == "stored"


class HeldStore(MemoryUsageStore):
    """A store whose write waits for ``release``: its batch stays in flight until then."""

    def __init__(self) -> None:
        super().__init__()
        self.writing, self.release = asyncio.Event(), asyncio.Event()

    async def write(self, records: Any) -> None:
        self.writing.set()
        await self.release.wait()
        await super().write(records)


class HeldSpill(SpillFile):
    """A spill file whose appends (in the journal's thread) wait for ``release``."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.appending, self.release = threading.Event(), threading.Event()

    def append(self, records: Any) -> None:
        self.appending.set()
        self.release.wait(5)
        super().append(records)


async def test_waiting_on_a_record_whose_batch_is_in_flight_gets_its_outcome() -> None:
    store = HeldStore()
    journal = UsageJournal(store)
    journal.record(record("a"))
    await store.writing.wait()
    waiter = asyncio.ensure_future(journal.durable(record("a")))
    await asyncio.sleep(0)
    store.release.set()
    assert await asyncio.wait_for(waiter, 5) == "stored"


async def test_a_waiter_that_comes_while_close_spills_its_record_gets_the_outcome(tmp_path: Path) -> None:
    store, spill = HeldStore(), HeldSpill(tmp_path / "u.db.spill")
    journal = UsageJournal(store, spill=spill)
    journal.record(record("a"))
    await store.writing.wait()  # "a" in flight, "b" queued behind it, nobody waiting on either
    journal.record(record("b"))
    closing = asyncio.ensure_future(journal.aclose(timeout_s=0.01))
    await asyncio.to_thread(spill.appending.wait, 5)  # close is spilling what it found pending
    waiter = asyncio.ensure_future(journal.durable(record("b")))
    await asyncio.sleep(0)
    spill.release.set()
    store.release.set()
    await asyncio.wait_for(closing, 5)
    assert await asyncio.wait_for(waiter, 1) == "spilled"


async def test_concurrent_records_share_one_commit(tmp_path: Path) -> None:
    journal = UsageJournal(SqliteUsageStore(tmp_path / "u.db"))
    outcomes = await asyncio.gather(*(journal.durable(record(f"c{i}")) for i in range(100)))
    assert set(outcomes) == {"stored"}
    assert journal.commits == 1
    await journal.aclose()


async def test_a_caller_that_never_yields_waits_for_room_once_a_whole_batch_is_queued(tmp_path: Path) -> None:
    journal = UsageJournal(SqliteUsageStore(tmp_path / "u.db"), batch_size=10, write_ahead=True)
    queued = []
    for i in range(95):  # nothing here gives the loop a turn but room()
        journal.record(record(f"h{i}"))
        queued.append(journal.pending)
        await journal.room()
    await journal.flush()
    assert max(queued) <= 20  # a batch queued, and at most the one the writer has taken
    assert len(await journal.store.records()) == 95
    await journal.aclose()


async def test_a_caller_waiting_for_room_goes_on_when_close_spills_the_queue(tmp_path: Path) -> None:
    store = HeldStore()
    journal = UsageJournal(store, spill=SpillFile(tmp_path / "u.db.spill"), batch_size=2)
    journal.record(record("a"))
    journal.record(record("b"))
    await journal.room()  # the writer took a and b, and holds them in a write that never ends
    await store.writing.wait()
    journal.record(record("c"))
    journal.record(record("d"))
    waiting = asyncio.ensure_future(journal.room())
    closing = asyncio.ensure_future(journal.aclose(timeout_s=0.05))
    await asyncio.wait_for(waiting, 5)  # close gave up on the write and spilled all four
    assert journal.spilled == 4
    store.release.set()  # close then replays the spill file into the store
    await asyncio.wait_for(closing, 5)


async def test_room_returns_at_once_while_less_than_a_batch_is_queued() -> None:
    journal = UsageJournal(MemoryUsageStore(), batch_size=10)
    for i in range(9):
        journal.record(record(f"h{i}"))
    await journal.room()
    assert journal.pending == 9 and await journal.store.records() == []
    await journal.aclose()


async def test_a_locked_store_sends_records_to_the_spill_file(locked: LockedLedger) -> None:
    journal = UsageJournal(locked.store())
    assert await journal.durable(record("a")) == "spilled"
    assert await journal.durable(record("b")) == "spilled"
    assert (journal.pending, journal.spilled, journal.failing) == (0, 2, True)
    assert spilled_keys(locked.path) == [("a", 1), ("b", 1)]
    await journal.aclose()


async def test_a_store_that_comes_back_gets_the_spilled_records(locked: LockedLedger) -> None:
    unlocked = asyncio.Event()

    async def wait_for_unlock(delay_s: float) -> None:
        await unlocked.wait()

    journal = UsageJournal(locked.store(), sleep=wait_for_unlock)
    await journal.durable(record("a"))
    locked.unlock()
    unlocked.set()
    assert await journal.durable(record("b")) in ("spilled", "stored")
    await journal.recovered()
    await journal.flush()
    assert sorted(r.key for r in await journal.store.records()) == [("a", 1), ("b", 1)]
    assert not journal.spill.exists()  # type: ignore[union-attr]
    await journal.aclose()


async def test_one_poison_record_among_a_hundred_is_set_aside_and_the_rest_written(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    journal = UsageJournal(SqliteUsageStore(tmp_path / "u.db"))
    records = [record(f"c{i}", input_tokens=2**63 if i == 37 else i) for i in range(100)]
    outcomes = await asyncio.gather(*(journal.durable(r) for r in records))
    assert outcomes.count("stored") == 99 and outcomes[37] == "set_aside"
    assert await journal.durable(record("later")) == "stored"
    assert len(await journal.store.records()) == 100
    assert spilled_keys(tmp_path / "u.db") == [("c37", 1)]
    assert "call c37 attempt 1" in caplog.text
    await journal.aclose()


async def test_a_spill_file_left_by_a_crashed_run_is_replayed_once(tmp_path: Path) -> None:
    SpillFile(tmp_path / "u.db.spill").append([record(f"c{i}") for i in range(50)])
    for start in range(2):
        journal = UsageJournal(SqliteUsageStore(tmp_path / "u.db"))
        assert await journal.durable(record(f"start{start}")) == "stored"
        assert not journal.spill.exists()  # type: ignore[union-attr]
        assert len(await journal.store.records()) == 51 + start
        await journal.aclose()


async def test_a_replay_cut_short_by_a_crash_is_taken_over(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "u.db.spill")
    spill.append([record("a"), record("b")])
    spill.path.rename(tmp_path / "u.db.spill.deadbeef.replay")  # a claim whose owner died
    journal = UsageJournal(SqliteUsageStore(tmp_path / "u.db"))
    await journal.replay()
    assert [r.key for r in await journal.store.records()] == [("a", 1), ("b", 1)]
    assert not spill.exists()
    await journal.aclose()


async def test_close_spills_what_the_locked_store_never_took(locked: LockedLedger) -> None:
    journal = UsageJournal(locked.store())
    journal.record(record("a"))
    await journal.aclose()
    assert spilled_keys(locked.path) == [("a", 1)]


async def test_fail_closed_refuses_new_calls_once_enough_records_wait_outside(locked: LockedLedger) -> None:
    journal = UsageJournal(locked.store(), max_records=2, policy="fail_closed")
    await journal.durable(record("a"))
    journal.admit()
    await journal.durable(record("b"))
    with pytest.raises(UsageLedgerUnavailableError, match="fail_closed"):
        journal.admit()
    await journal.aclose()


async def test_fail_closed_still_keeps_records_of_calls_already_running(locked: LockedLedger) -> None:
    journal = UsageJournal(locked.store(), max_records=1, policy="fail_closed")
    outcomes = await asyncio.gather(journal.durable(record("a")), journal.durable(record("b")))
    assert outcomes.count("spilled") == 2
    await journal.aclose()


async def test_fail_open_never_refuses_and_never_drops(locked: LockedLedger) -> None:
    journal = UsageJournal(locked.store(), max_records=1)
    for name in "abc":
        journal.admit()
        assert await journal.durable(record(name)) == "spilled"
    assert journal.spilled == 3
    await journal.aclose()


class SilentStore(MemoryUsageStore):
    """A store that takes a write and never answers it."""

    async def write(self, records: Any) -> None:
        await asyncio.Event().wait()


async def test_close_is_bounded_by_its_timeout_when_the_store_never_answers_and_keeps_the_records(
        tmp_path: Path) -> None:
    journal = UsageJournal(SilentStore(), spill=SpillFile(tmp_path / "ledger.spill"))
    journal.record(record("a"))
    await asyncio.wait_for(journal.aclose(timeout_s=0.05), 5)  # hung forever in its final replay
    claims = SpillFile(tmp_path / "ledger.spill").claim()  # what the next start replays
    assert [r.call_id for claim in claims for r in claim.records] == ["a"]
    for claim in claims:
        claim.release()
