"""A poison record the spill file could not take keeps its write-ahead segment for the next replay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from provmw.stores.usage import SqliteUsageStore
from provmw.stores.usage.journal import UsageJournal
from provmw.stores.usage.spill import SpillFile
from tests.stores.test_usage_store import record

POISON = record("poison", input_tokens=2**63)  # more than SQLite's INTEGER holds: refused on its own


class FullDisk(SpillFile):
    """A spill file with no room: nothing can be set aside in it."""

    def append(self, records: Any) -> None:
        raise OSError(28, "No space left on device")


def segments(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob("u.db.spill.*.replay"))


async def test_a_poison_record_that_went_nowhere_keeps_its_segment(tmp_path: Path) -> None:
    ledger = UsageJournal(SqliteUsageStore(tmp_path / "u.db"), spill=FullDisk(tmp_path / "u.db.spill"),
                          write_ahead=True, linger_s=0)
    assert await ledger.durable(POISON) == "journaled"
    assert await ledger.durable(record("fine")) == "journaled"
    await ledger.aclose()
    assert [r.call_id for r in await SqliteUsageStore(tmp_path / "u.db").records()] == ["fine"]
    [segment] = segments(tmp_path)
    assert b'"poison"' in segment.read_bytes()


async def test_the_next_replay_sets_the_kept_poison_record_aside(tmp_path: Path) -> None:
    ledger = UsageJournal(SqliteUsageStore(tmp_path / "u.db"), spill=FullDisk(tmp_path / "u.db.spill"),
                          write_ahead=True, linger_s=0)
    await ledger.durable(POISON)
    await ledger.aclose()
    again = UsageJournal(SqliteUsageStore(tmp_path / "u.db"))
    await again.replay()
    await again.aclose()
    assert segments(tmp_path) == []
    assert b'"poison"' in (tmp_path / "u.db.spill").read_bytes()
