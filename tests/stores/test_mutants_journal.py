"""The usage journal's recovery probe and its files, pinned where the mutation run found them unchecked."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from provmw.errors import UsageLedgerUnavailableError
from provmw.stores.usage import MemoryUsageStore, SqliteUsageStore, UsageRecord
from provmw.stores.usage.journal import UsageJournal
from provmw.stores.usage.spill import SpillFile
from tests.polling import eventually
from tests.stores.test_journal import LockedLedger, spilled_keys
from tests.stores.test_journal_nowhere import Probes, unwritable, writable
from tests.stores.test_usage_store import record


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[LockedLedger]:
    ledger = LockedLedger(tmp_path / "ledger.db")
    yield ledger
    ledger.unlock()


async def test_the_recovery_probe_doubles_its_delay_up_to_the_cap(locked: LockedLedger) -> None:
    delays: list[float] = []

    async def probe_after(delay_s: float) -> None:
        delays.append(delay_s)
        if len(delays) == 5:  # the store is back for the fifth probe
            locked.unlock()

    journal = UsageJournal(locked.store(), retry_s=1.0, max_retry_s=5.0, sleep=probe_after)
    assert await journal.durable(record("a")) == "spilled"
    await journal.recovered()
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0] and journal.failing is False
    await journal.aclose()


async def test_poison_records_in_both_halves_of_a_batch_are_all_set_aside(tmp_path: Path) -> None:
    journal = UsageJournal(SqliteUsageStore(tmp_path / "u.db"))
    records = [record(f"c{i}", input_tokens=2**63 if i in (10, 90) else i) for i in range(100)]
    outcomes = await asyncio.gather(*(journal.durable(r) for r in records))
    assert [i for i, outcome in enumerate(outcomes) if outcome != "stored"] == [10, 90]
    assert spilled_keys(tmp_path / "u.db") == [("c10", 1), ("c90", 1)]
    assert len(await journal.store.records()) == 98
    await journal.aclose()


async def test_a_record_set_aside_is_logged_with_the_error_the_store_gave_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    journal = UsageJournal(SqliteUsageStore(tmp_path / "u.db"))
    records = [record(f"c{i}", input_tokens=2**63 if i == 3 else i) for i in range(8)]
    await asyncio.gather(*(journal.durable(r) for r in records))
    [line] = [r.getMessage() for r in caplog.records if "refuses the record" in r.getMessage()]
    assert "call c3 attempt 1" in line and "OverflowError" in line
    await journal.aclose()


class CountedProbes(Probes):
    """The probe's sleep, released one probe at a time; ``entered`` counts the sleeps begun, so a probe
    has run to its end once the next sleep is entered."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = 0

    async def sleep(self, delay_s: float) -> None:
        self.entered += 1
        await super().sleep(delay_s)


async def test_a_held_record_stays_held_through_probes_that_find_nowhere_to_go(locked: LockedLedger) -> None:
    probes = CountedProbes()
    ledger = UsageJournal(locked.store(), spill=unwritable(locked.path), sleep=probes.sleep, policy="fail_closed")
    waiter = asyncio.ensure_future(ledger.durable(record("a")))
    assert await eventually(lambda: ledger.held, lambda held: held == 1) == 1
    for probe in (1, 2):  # the store still locked, the spill file still unwritable: held again
        probes.go.set()
        assert await eventually(lambda: probes.entered, (probe + 1).__le__) == probe + 1
    writable(ledger.spill)  # type: ignore[arg-type]
    probes.go.set()
    assert await asyncio.wait_for(waiter, 5) == "spilled"
    await ledger.aclose()


async def test_a_record_nobody_waits_for_is_held_without_failing_the_writer(locked: LockedLedger) -> None:
    ledger = UsageJournal(locked.store(), spill=unwritable(locked.path), sleep=Probes().sleep)
    ledger.record(record("a"))  # a hit's record: queued, nobody waiting on it
    await ledger.flush()  # the writer has held it, and ended without an error
    assert ledger.held == 1
    await ledger.aclose(timeout_s=0.01)


class BrokenStore(MemoryUsageStore):
    """A store whose every write fails with an error of its own, even one of no records (a disk I/O error)."""

    async def write(self, records: Sequence[UsageRecord]) -> None:
        raise sqlite3.OperationalError("disk I/O error")


async def test_a_store_that_fails_even_an_empty_write_is_down_not_refusing_a_record(tmp_path: Path) -> None:
    journal = UsageJournal(BrokenStore(), spill=SpillFile(tmp_path / "u.db.spill"), sleep=Probes().sleep)
    assert await journal.durable(record("a")) == "spilled"  # not set aside as a record the store refuses
    assert journal.failing is True
    await journal.aclose(timeout_s=0.01)


async def test_a_journaled_record_with_nowhere_to_go_is_left_to_its_segment_not_held(
        locked: LockedLedger, tmp_path: Path) -> None:
    spill = tmp_path / "ledger.db.spill"
    spill.symlink_to(tmp_path / "gone" / "spill")  # appends to the spill file fail; the segments beside it work
    ledger = UsageJournal(locked.store(), spill=SpillFile(spill), write_ahead=True, linger_s=0.0,
                          sleep=Probes().sleep)
    assert await ledger.durable(record("a")) == "journaled"
    await ledger.flush()
    assert ledger.held == 0  # durable in its write-ahead segment, which the next replay takes
    await ledger.aclose(timeout_s=0.01)


async def test_a_write_ahead_segment_whose_records_went_nowhere_outlives_the_journal(
        locked: LockedLedger, tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "ledger.db.spill")
    spill.path.symlink_to(tmp_path / "gone" / "spill")  # appends to the spill file fail; segments beside it work
    ledger = UsageJournal(locked.store(), spill=spill, write_ahead=True, linger_s=0.0, sleep=Probes().sleep)
    assert await ledger.durable(record("a")) == "journaled"
    await ledger.flush()
    await ledger.aclose(timeout_s=0.01)
    [segment] = spill.claim()  # what the next start replays
    assert [r.key for r in segment.records] == [("a", 1)]
    segment.release()


async def test_fail_closed_says_why_it_refuses_a_call_while_records_have_nowhere_to_go(locked: LockedLedger) -> None:
    probes = CountedProbes()
    ledger = UsageJournal(locked.store(), spill=unwritable(locked.path), sleep=probes.sleep, policy="fail_closed")
    waiter = asyncio.ensure_future(ledger.durable(record("a")))
    assert await eventually(lambda: ledger.held, lambda held: held == 1) == 1
    with pytest.raises(UsageLedgerUnavailableError) as refused:
        ledger.admit()
    assert str(refused.value) == ("usage ledger: neither the store nor the spill file takes records "
                                  "(1 held in memory); refusing new calls (failure_policy=fail_closed)")
    await ledger.aclose(timeout_s=0.01)
    with pytest.raises(UsageLedgerUnavailableError):
        await waiter


class FullSpill(SpillFile):
    """A spill file on a full disk whose append (in the journal's thread) fails once ``release`` is set."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.appending, self.release = threading.Event(), threading.Event()

    def append(self, records: Sequence[UsageRecord]) -> None:
        self.appending.set()
        self.release.wait(5)
        raise OSError(28, "No space left on device")


async def test_a_caller_who_waits_on_a_journaled_record_that_goes_nowhere_is_told_it_is_journaled(
        locked: LockedLedger, tmp_path: Path) -> None:
    spill = FullSpill(tmp_path / "ledger.db.spill")
    ledger = UsageJournal(locked.store(), spill=spill, write_ahead=True, linger_s=0.0, sleep=Probes().sleep)
    assert await ledger.durable(record("a")) == "journaled"
    await asyncio.to_thread(spill.appending.wait, 5)  # the store failed: the writer is spilling "a"
    waiter = asyncio.ensure_future(ledger.durable(record("a")))  # the same record, while the store fails
    await asyncio.sleep(0)
    spill.release.set()
    assert await asyncio.wait_for(waiter, 5) == "journaled"  # durable in its write-ahead segment
    await ledger.aclose(timeout_s=0.01)


def segments(folder: Path) -> list[Path]:
    """The write-ahead segments beside ``folder``'s ledger ``u.db``."""
    return list(folder.glob("u.db.spill.*.replay"))


async def test_a_full_write_ahead_segment_is_removed_once_its_records_are_stored(tmp_path: Path) -> None:
    journal = UsageJournal(SqliteUsageStore(tmp_path / "u.db"), write_ahead=True, linger_s=0.0)
    for i in range(120):  # lines of some 10 KB: past the segment's 1 MiB
        assert await journal.durable(record(f"c{i}", model="m" * 10_000)) == "journaled"
    await journal.flush()
    assert len(await journal.store.records()) == 120
    assert segments(tmp_path) == []  # sealed with its batch, and dropped
    await journal.aclose()


async def test_a_full_write_ahead_segment_whose_records_went_nowhere_outlives_the_journal(
        locked: LockedLedger, tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "ledger.db.spill")
    spill.path.symlink_to(tmp_path / "gone" / "spill")  # appends to the spill file fail; segments beside it work
    ledger = UsageJournal(locked.store(), spill=spill, write_ahead=True, linger_s=0.0, sleep=Probes().sleep)
    for i in range(120):  # lines of some 10 KB: past the segment's 1 MiB, sealed with the batch
        assert await ledger.durable(record(f"c{i}", model="m" * 10_000)) == "journaled"
    await ledger.flush()
    await ledger.aclose(timeout_s=0.01)
    claims = spill.claim()  # what the next start replays
    assert sum(len(claim.records) for claim in claims) == 120
    for claim in claims:
        claim.release()


def test_the_spill_file_beside_a_full_ledger_syncs_each_append(tmp_path: Path) -> None:
    journal = UsageJournal(SqliteUsageStore(tmp_path / "ledger.db", synchronous="FULL"))
    assert journal.spill is not None and journal.spill.fsync


def test_the_spill_file_beside_a_normal_ledger_does_not_sync(tmp_path: Path) -> None:
    journal = UsageJournal(SqliteUsageStore(tmp_path / "ledger.db"))
    assert journal.spill is not None and not journal.spill.fsync


class SpillOnly(MemoryUsageStore):
    """A store that declares a spill file and no ``synchronous`` (a plugin's may not have one)."""

    def __init__(self, spill_path: Path) -> None:
        super().__init__()
        self.spill_path = spill_path


def test_a_store_that_names_no_synchronous_gets_a_spill_file_that_does_not_sync(tmp_path: Path) -> None:
    journal = UsageJournal(SpillOnly(tmp_path / "ledger.spill"))
    assert journal.spill is not None and not journal.spill.fsync


def test_a_journal_holds_at_most_fifty_thousand_records_by_default() -> None:
    assert UsageJournal(MemoryUsageStore()).max_records == 50_000


async def test_the_recovery_probe_starts_at_a_twentieth_of_a_second_and_stops_doubling_at_five(
        locked: LockedLedger) -> None:
    delays: list[float] = []

    async def probe_after(delay_s: float) -> None:
        delays.append(delay_s)
        if len(delays) == 9:  # the store is back for the ninth probe
            locked.unlock()

    journal = UsageJournal(locked.store(), sleep=probe_after)
    assert await journal.durable(record("a")) == "spilled"
    await journal.recovered()
    assert delays == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])
    await journal.aclose()


async def test_a_poison_record_the_spill_file_cannot_take_is_lost_saying_why(tmp_path: Path) -> None:
    path = tmp_path / "u.db"
    journal = UsageJournal(SqliteUsageStore(path), spill=unwritable(path))
    with pytest.raises(UsageLedgerUnavailableError, match=r"could not be made durable \(the spill file failed \("):
        await journal.durable(record("c1", input_tokens=2**63))  # the store never takes it
    assert journal.lost == 1
    await journal.aclose()


class RefusesBigCounts(MemoryUsageStore):
    """A memory store (no spill file) that refuses a record whose counts it cannot hold."""

    async def write(self, records: Sequence[UsageRecord]) -> None:
        if any(r.input_tokens >= 2**63 for r in records):
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        await super().write(records)


async def test_a_poison_record_beside_a_store_with_no_spill_file_is_lost_saying_so() -> None:
    journal = UsageJournal(RefusesBigCounts())
    with pytest.raises(UsageLedgerUnavailableError, match=r"\(this store declares no spill file\)\)$"):
        await journal.durable(record("c1", input_tokens=2**63))
    await journal.aclose()

