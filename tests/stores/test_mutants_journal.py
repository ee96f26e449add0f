"""The usage journal's recovery probe and its files, pinned where the mutation run found them unchecked."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from provmw.stores.usage import SqliteUsageStore
from provmw.stores.usage.journal import UsageJournal
from tests.stores.test_journal import LockedLedger, spilled_keys
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
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
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
