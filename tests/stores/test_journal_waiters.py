"""The usage journal: every waiter gets its record's outcome, while the journal closes too."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

from provmw.stores.journal import UsageJournal
from provmw.stores.spill import SpillFile
from provmw.stores.usage import SqliteUsageStore, UsageRecord
from tests.stores.test_usage_store import record


class HeldStore(SqliteUsageStore):
    """A ledger whose writes wait for ``release``: its batch stays in flight until then."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writing, self.release = asyncio.Event(), asyncio.Event()

    async def write(self, records: Sequence[UsageRecord]) -> None:
        self.writing.set()
        await self.release.wait()
        await super().write(records)


class HeldSpill(SpillFile):
    """A spill file whose appends (in the journal's thread) wait for ``release``."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.appending, self.release = threading.Event(), threading.Event()

    def append(self, records: Sequence[UsageRecord]) -> None:
        self.appending.set()
        self.release.wait(5)
        super().append(records)


async def test_a_waiter_that_comes_while_close_spills_a_queued_record_gets_its_outcome(tmp_path: Path) -> None:
    store, spill = HeldStore(tmp_path / "u.db"), HeldSpill(tmp_path / "u.db.spill")
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
