"""The usage journal: nothing lost while the store fails, nothing written twice after."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from provmw.errors import UsageLedgerUnavailableError
from provmw.stores.journal import UsageJournal
from provmw.stores.usage import MemoryUsageStore, SqliteUsageStore
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


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[LockedLedger]:
    ledger = LockedLedger(tmp_path / "ledger.db")
    yield ledger
    ledger.unlock()


async def test_records_reach_the_store_in_the_background() -> None:
    journal = UsageJournal(MemoryUsageStore())
    journal.record(record("a"))
    journal.record(record("b"))
    await journal.flush()
    assert journal.pending == 0
    assert len(await journal.store.records()) == 2


async def test_recording_a_key_twice_keeps_one() -> None:
    journal = UsageJournal(MemoryUsageStore())
    journal.record(record("a"))
    journal.record(record("a"))
    await journal.flush()
    assert len(await journal.store.records()) == 1


async def test_a_failing_store_keeps_records_until_it_recovers(locked: LockedLedger) -> None:
    journal = UsageJournal(locked.store(), retry_s=0.01, max_retry_s=0.02)
    journal.record(record("a"))
    await asyncio.sleep(0.1)
    assert journal.pending == 1
    locked.unlock()
    await journal.flush()
    assert [r.key for r in await journal.store.records()] == [("a", 1)]
    await journal.aclose()


async def test_fail_closed_refuses_new_calls_when_the_journal_is_full(locked: LockedLedger) -> None:
    journal = UsageJournal(locked.store(), max_records=2,
                           policy="fail_closed", retry_s=0.01)
    journal.record(record("a"))
    journal.admit()
    journal.record(record("b"))
    with pytest.raises(UsageLedgerUnavailableError, match="fail_closed"):
        journal.admit()


async def test_fail_closed_still_keeps_records_of_calls_already_running(locked: LockedLedger) -> None:
    journal = UsageJournal(locked.store(), max_records=1,
                           policy="fail_closed", retry_s=0.01)
    journal.record(record("a"))
    journal.record(record("b"))
    assert (journal.pending, journal.dropped) == (2, 0)


async def test_fail_open_drops_and_counts_past_the_bound(locked: LockedLedger) -> None:
    journal = UsageJournal(locked.store(), max_records=1, retry_s=0.01)
    journal.record(record("a"))
    journal.record(record("b"))
    journal.admit()  # fail-open never refuses
    assert (journal.pending, journal.dropped) == (1, 1)
