"""Usage stores: idempotent per (correlation id, attempt), SQLite in WAL with FULL sync."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest

from provmw.stores.usage import MemoryUsageStore, SqliteUsageStore, UsageRecord, UsageStore


def record(correlation_id: str = "c1", attempt: int = 1, **fields: object) -> UsageRecord:
    values: dict[str, object] = {"timestamp": 100.0, "operation": "chat", "config_id": "oa",
                                 "provider": "openai", "model": "gpt", **fields}
    return UsageRecord(call_id=correlation_id, correlation_id=correlation_id, attempt=attempt, **values)  # type: ignore[arg-type]


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[UsageStore]:
    made: UsageStore = MemoryUsageStore() if request.param == "memory" else SqliteUsageStore(tmp_path / "u.db")
    yield made
    await made.aclose()


async def test_records_read_back_as_written(store: UsageStore) -> None:
    written = record(user="ada", tenant="acme", input_tokens=3, cost_usd=0.5, billed="unknown")
    await store.write([written])
    assert await store.records() == [written]


async def test_writing_a_key_again_changes_nothing(store: UsageStore) -> None:
    await store.write([record(input_tokens=3)])
    await store.write([record(input_tokens=3), record(attempt=2)])
    assert sorted(r.key for r in await store.records()) == [("c1", 1), ("c1", 2)]


async def test_records_since_a_time_leave_older_ones_out(store: UsageStore) -> None:
    await store.write([record("old", timestamp=10.0), record("new", timestamp=20.0)])
    assert [r.correlation_id for r in await store.records(since=15.0)] == ["new"]


async def test_the_sqlite_ledger_runs_in_wal_with_full_sync(tmp_path: Path) -> None:
    store = SqliteUsageStore(tmp_path / "u.db")
    await store.write([record()])
    modes = await store.db.run(lambda c: (c.execute("PRAGMA journal_mode").fetchone()[0],
                                          c.execute("PRAGMA synchronous").fetchone()[0]))
    await store.aclose()
    assert modes == ("wal", 2)  # 2 is FULL


async def test_a_failed_batch_writes_nothing(tmp_path: Path) -> None:
    store = SqliteUsageStore(tmp_path / "u.db")
    await store.write([record("first")])
    bad = attrs.evolve(record("second"), input_tokens=None)  # type: ignore[arg-type]
    with pytest.raises(sqlite3.IntegrityError):
        await store.write([record("also"), bad])
    assert [r.correlation_id for r in await store.records()] == ["first"]
    await store.aclose()
