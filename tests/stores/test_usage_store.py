"""Usage stores: idempotent per (call id, attempt); SQLite in WAL, NORMAL sync unless asked for FULL,
migrating a 0.1.0 ledger, and one made before the key_id and team columns, in place."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest

from provmw.errors import UsageLedgerUnavailableError
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


def lists_prepared_statements() -> bool:
    with contextlib.closing(sqlite3.connect(":memory:")) as connection:
        return ("ENABLE_STMTVTAB",) in connection.execute("PRAGMA compile_options").fetchall()


@pytest.mark.skipif(not lists_prepared_statements(), reason="this SQLite has no sqlite_stmt table")
async def test_the_sqlite_ledger_prepares_a_few_inserts_whatever_its_batch_sizes(tmp_path: Path) -> None:
    # sqlite3 keeps a connection's last 128 statements prepared, an INSERT about 2.4 KB a row:
    # one statement per batch size held tens of MB, grown a size at a time over hours.
    store = SqliteUsageStore(tmp_path / "u.db")
    for rows in range(1, 131):
        await store.write([record(f"{rows}-{n}") for n in range(rows)])
    prepared = await store.db.run_inline(lambda c: c.execute(
        "SELECT count(*) FROM sqlite_stmt WHERE sql LIKE 'INSERT INTO usage %'").fetchone()[0])
    await store.aclose()
    assert prepared <= 7


async def sync_modes(store: SqliteUsageStore) -> tuple[str, int]:
    await store.write([record()])
    modes = await store.db.run(lambda c: (c.execute("PRAGMA journal_mode").fetchone()[0],
                                          c.execute("PRAGMA synchronous").fetchone()[0]))
    await store.aclose()
    return modes


async def test_the_sqlite_ledger_runs_in_wal_with_normal_sync(tmp_path: Path) -> None:
    assert await sync_modes(SqliteUsageStore(tmp_path / "u.db")) == ("wal", 1)  # 1 is NORMAL


async def test_the_sqlite_ledger_syncs_fully_when_asked(tmp_path: Path) -> None:
    assert await sync_modes(SqliteUsageStore(tmp_path / "u.db", synchronous="FULL")) == ("wal", 2)  # 2 is FULL


async def test_a_locked_ledger_raises_the_typed_store_down_error(tmp_path: Path) -> None:
    SqliteUsageStore(tmp_path / "u.db").db.run_sync(lambda c: None)
    holder = sqlite3.connect(tmp_path / "u.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    store = SqliteUsageStore(tmp_path / "u.db", busy_timeout_s=0.01)
    with pytest.raises(UsageLedgerUnavailableError, match="database is locked"):
        await store.write([record()])
    holder.close()
    await store.aclose()


async def test_a_batch_at_normal_is_written_on_the_loops_thread_and_one_at_full_by_the_worker(
        tmp_path: Path) -> None:
    inline = []
    for synchronous in ("NORMAL", "FULL"):
        store = SqliteUsageStore(tmp_path / f"{synchronous}.db", synchronous=synchronous)
        for i in range(3):  # the first opens the file on the worker
            await store.write([record(f"c{i}")])
        inline.append(store.db._inline._commits)
        await store.aclose()
    assert inline == [2, 0]


async def test_the_wal_of_a_ledger_written_on_the_loop_starts_over_past_16_mb(tmp_path: Path) -> None:
    store = SqliteUsageStore(tmp_path / "u.db")
    for batch in range(700):  # about 50 KB of WAL a batch: 35 MB if it never started over
        await store.write([record(f"c{batch}-{i}", model="m" * 200) for i in range(100)])
    assert (tmp_path / "u.db-wal").stat().st_size < 24 * 1024 * 1024
    assert len(await store.records()) == 70_000
    await store.aclose()


OLD_SCHEMA = """
CREATE TABLE usage (
    correlation_id TEXT NOT NULL, attempt INTEGER NOT NULL, timestamp REAL NOT NULL,
    operation TEXT NOT NULL, config_id TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,
    user TEXT, tenant TEXT, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL, cost_usd REAL, latency_s REAL NOT NULL,
    status TEXT NOT NULL, error_type TEXT, billed TEXT NOT NULL,
    PRIMARY KEY (correlation_id, attempt)
);
CREATE INDEX usage_by_time ON usage (timestamp);
INSERT INTO usage VALUES ('old1', 1, 10.0, 'chat', 'oa', 'openai', 'gpt', 'ada', NULL, 5, 7, 2, 0.25, 0.1,
                          'ok', NULL, 'yes');
INSERT INTO usage VALUES ('old1', 2, 11.0, 'chat', 'oa', 'openai', 'gpt', NULL, NULL, 0, 0, 0, NULL, 0.2,
                          'error', 'ProviderTimeoutError', 'unknown');
"""


async def test_a_ledger_made_by_0_1_0_is_migrated_keeping_its_rows(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "old.db") as old:
        old.executescript(OLD_SCHEMA)
    store = SqliteUsageStore(tmp_path / "old.db")
    await store.write([record("new", timestamp=12.0, reasoning_tokens=3)])
    found = await store.records()
    await store.aclose()
    assert [(r.key, r.correlation_id, r.input_tokens, r.billed) for r in found] == [
        (("old1", 1), "old1", 5, "yes"), (("old1", 2), "old1", 0, "unknown"), (("new", 1), "new", 0, "yes")]
    assert found[0] == record("old1", timestamp=10.0, user="ada", input_tokens=5, output_tokens=7,
                              cached_input_tokens=2, cost_usd=0.25, latency_s=0.1)


BEFORE_KEY_AND_TEAM = """
CREATE TABLE usage (
    call_id TEXT NOT NULL, attempt INTEGER NOT NULL, correlation_id TEXT NOT NULL, timestamp REAL NOT NULL,
    operation TEXT NOT NULL, config_id TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,
    user TEXT, tenant TEXT, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL, cache_write_5m_tokens INTEGER NOT NULL,
    cache_write_1h_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL, cost_usd REAL, latency_s REAL NOT NULL,
    status TEXT NOT NULL, error_type TEXT, billed TEXT NOT NULL,
    PRIMARY KEY (call_id, attempt)
);
CREATE INDEX usage_by_time ON usage (timestamp);
INSERT INTO usage VALUES ('old', 1, 'old', 10.0, 'chat', 'oa', 'openai', 'gpt', 'ada', 'acme', 5, 7, 0, 0, 0, 0,
                          0.25, 0.1, 'ok', NULL, 'yes');
"""


async def test_a_ledger_made_before_key_id_and_team_gains_them_keeping_its_rows(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "old.db") as old:
        old.executescript(BEFORE_KEY_AND_TEAM)
    store = SqliteUsageStore(tmp_path / "old.db")
    await store.write([record("new", timestamp=12.0, key_id="0123456789ab", team="acme/search")])
    found = await store.records()
    await store.aclose()
    assert found == [record("old", timestamp=10.0, user="ada", tenant="acme", input_tokens=5, output_tokens=7,
                            cost_usd=0.25, latency_s=0.1),
                     record("new", timestamp=12.0, key_id="0123456789ab", team="acme/search")]


async def test_a_failed_batch_writes_nothing(tmp_path: Path) -> None:
    store = SqliteUsageStore(tmp_path / "u.db")
    await store.write([record("first")])
    bad = attrs.evolve(record("second"), input_tokens=None)  # type: ignore[arg-type]
    with pytest.raises(sqlite3.IntegrityError):
        await store.write([record("also"), bad])
    assert [r.correlation_id for r in await store.records()] == ["first"]
    await store.aclose()
