"""SqliteKeyStore beyond the contract: what its file holds, what a verify reads, what it never says."""

from __future__ import annotations

import logging
import sqlite3
import traceback
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from provmw.gateway import SqliteKeyStore
from provmw.gateway.conformance import MALFORMED_KEYS
from provmw.gateway.keys import RESPONSES_KEPT_S, KeyRecord, key_digest


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteKeyStore]:
    keys = SqliteKeyStore(tmp_path / "keys.sqlite3")
    yield keys
    await keys.aclose()


def secret(whole: str) -> str:
    return whole.split("_", 2)[2]


def file_bytes(folder: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file())


async def test_the_file_holds_the_keys_hash_and_never_its_secret(store: SqliteKeyStore, tmp_path: Path) -> None:
    whole, record = await store.create("acme", team="search")
    rotated, _ = await store.rotate(record.key_id)
    await store.verify(whole)
    held = file_bytes(tmp_path)  # the database, its WAL and shared memory, while open
    assert key_digest(whole).encode() in held
    for shown in (whole, rotated):
        assert secret(shown).encode() not in held
    await store.aclose()
    assert not any(secret(shown).encode() in file_bytes(tmp_path) for shown in (whole, rotated))


async def test_a_record_repr_holds_neither_secret_nor_hash(store: SqliteKeyStore) -> None:
    whole, record = await store.create("acme", name="ci")
    text = repr([record, await store.verify(whole), await store.list()])
    assert secret(whole) not in text
    assert key_digest(whole) not in text
    assert "sha" not in repr(KeyRecord.__attrs_attrs__)  # no field could hold it


async def test_no_log_line_holds_the_secret(store: SqliteKeyStore, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    whole, record = await store.create("acme")
    await store.verify(whole)
    await store.verify(whole[:-1] + "x")
    rotated, _ = await store.rotate(record.key_id)
    assert not any(secret(shown) in caplog.text for shown in (whole, rotated))


async def test_a_failed_read_says_nothing_of_the_key_presented(tmp_path: Path) -> None:
    unreadable = SqliteKeyStore(tmp_path)  # a folder: every read fails
    whole = "pmk_0123456789ab_" + "s3cretS3cret" * 3 + "s3cretS"
    with pytest.raises(sqlite3.Error) as failed:
        await unreadable.verify(whole)
    assert secret(whole) not in "".join(traceback.format_exception(failed.value))
    await unreadable.aclose()


@pytest.mark.parametrize("presented", MALFORMED_KEYS, ids=range(len(MALFORMED_KEYS)))
async def test_a_malformed_key_is_refused_without_reading_the_store(tmp_path: Path, presented: object) -> None:
    unreadable = SqliteKeyStore(tmp_path)  # a folder: a read would raise
    assert await unreadable.verify(presented) is None  # type: ignore[arg-type]
    await unreadable.aclose()


async def test_a_verify_is_one_read_by_primary_key(store: SqliteKeyStore) -> None:
    whole, _ = await store.create("acme")
    statements: list[str] = []
    await store.db.run(lambda connection: connection.set_trace_callback(statements.append))
    await store.verify(whole)
    await store.db.run(lambda connection: connection.set_trace_callback(None))
    assert len(statements) == 1
    plan = await store.db.run(lambda c: c.execute(f"EXPLAIN QUERY PLAN {statements[0]}").fetchall())
    assert [row[-1] for row in plan] == ["SEARCH gateway_keys USING PRIMARY KEY (key_id=?)"]


async def test_a_key_budget_needs_the_key_to_exist_but_a_team_budget_does_not(store: SqliteKeyStore) -> None:
    limit = await store.set_budget("team", "acme/not-yet", "month", max_cost_usd=5.0)
    assert limit is not None
    assert (limit.scope, limit.match, limit.max_cost_usd) == ("team", "acme/not-yet", 5.0)


async def test_a_response_older_than_thirty_days_is_unknown_and_goes_with_the_next_write(tmp_path: Path) -> None:
    now = [1_000_000_000.0]
    store = SqliteKeyStore(tmp_path / "keys.sqlite3", clock=lambda: now[0])
    try:
        await store.record_response("resp_old", "acme")
        now[0] += RESPONSES_KEPT_S + 1
        assert await store.response_owner("resp_old") is None
        await store.record_response("resp_new", "acme")
    finally:
        await store.aclose()
    with sqlite3.connect(tmp_path / "keys.sqlite3") as db:
        assert db.execute("SELECT response_id FROM gateway_responses").fetchall() == [("resp_new",)]
