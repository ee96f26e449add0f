"""The usage journal's recovery probe and its files, pinned where the mutation run found them unchecked."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from provmw.stores.usage import SqliteUsageStore
from provmw.stores.usage.journal import UsageJournal
from provmw.stores.usage.spill import SpillFile
from tests.stores.test_journal import LockedLedger
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
