"""The PostgreSQL ledger: the usage store contract, the plugin's hooks, outages and provmw usage."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from provmw_postgres import PostgresOptions, PostgresUnavailableError, PostgresUsageStore, provmw_usage_store

from provmw.cli import main
from provmw.errors import ConfigurationError
from provmw.stores.usage import UsageRecord, UsageStore
from provmw.stores.usage.journal import UsageJournal
from provmw.stores.usage.spill import SpillFile
from provmw.testing import UsageStoreConformance

pytestmark = pytest.mark.postgres

DOWN = "postgresql://ledger:pg-s3cret@127.0.0.1:1/test"  # nothing listens on port 1


def record(call_id: str, **fields: object) -> UsageRecord:
    values: dict[str, object] = {"attempt": 1, "correlation_id": call_id, "timestamp": 1_700_000_000.0,
                                 "operation": "chat", "config_id": "oa", "provider": "openai", "model": "m", **fields}
    return UsageRecord(call_id=call_id, **values)  # type: ignore[arg-type]


class TestPostgresUsageStore(UsageStoreConformance):
    @pytest.fixture(autouse=True)
    def _schema(self, schema: str, postgres_url: str) -> None:
        self.schema, self.url = schema, postgres_url

    async def open_store(self, name: str) -> UsageStore:
        return PostgresUsageStore(self.url, PostgresOptions(schema=self.schema, table=name))


def test_the_plugin_serves_both_postgresql_schemes_and_no_other() -> None:
    assert isinstance(provmw_usage_store("postgres://h/db", {}), PostgresUsageStore)
    assert isinstance(provmw_usage_store("postgresql://h/db", {"table": "t"}), PostgresUsageStore)
    assert provmw_usage_store("redis://h/0", {}) is None


def test_a_bad_table_name_is_refused_naming_it() -> None:
    with pytest.raises(ConfigurationError, match=r"\[middleware.usage\]: table must be a letter .* got 'usage; drop'"):
        provmw_usage_store("postgresql://h/db", {"table": "usage; drop"})


def test_an_unknown_key_is_refused_with_a_hint() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown key 'tabel' \(did you mean 'table'\?\)"):
        provmw_usage_store("postgresql://h/db", {"tabel": "usage"})


async def test_an_unreachable_database_is_a_typed_error_without_the_password() -> None:
    store = PostgresUsageStore(DOWN, PostgresOptions(connect_timeout_s=2))
    with pytest.raises(PostgresUnavailableError) as caught:
        await store.write([record("c1")])
    await store.aclose()
    assert "pg-s3cret" not in str(caught.value)
    assert "pg-s3cret" not in repr(store)
    assert "ledger:***@127.0.0.1:1" in str(caught.value)


async def test_the_journal_spills_records_while_the_database_is_down_and_logs_no_password(
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "ledger.spill")
    journal = UsageJournal(PostgresUsageStore(DOWN, PostgresOptions(connect_timeout_s=2)), spill=spill, retry_s=0.01)
    with caplog.at_level(logging.WARNING):
        assert await journal.durable(record("c1")) == "spilled"
        await journal.aclose(timeout_s=0.5)
    assert "c1" in spill.path.read_text()
    assert "PostgreSQL ledger at postgresql://ledger:***@" in caplog.text
    assert "pg-s3cret" not in caplog.text


async def test_a_store_reconnects_after_its_connection_is_killed(schema: str, postgres_url: str) -> None:
    store = PostgresUsageStore(postgres_url, PostgresOptions(schema=schema))
    await store.write([record("before")])
    assert store._connection is not None
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (store._connection.info.backend_pid,))
    with pytest.raises(PostgresUnavailableError):
        await store.write([record("refused")])
    await store.write([record("after")])
    assert sorted(r.call_id for r in await store.records()) == ["after", "before"]
    await store.aclose()


async def test_provmw_usage_sums_the_fleet_ledger_in_sql(schema: str, postgres_url: str, tmp_path: Path) -> None:
    store = PostgresUsageStore(postgres_url, PostgresOptions(schema=schema))
    await store.write([record("c1", user="ada", cost_usd=0.25), record("c1", attempt=2, user="ada", cost_usd=0.5),
                       record("c2", user="bob", status="error", billed="unknown")])
    await store.aclose()
    config = tmp_path / "provmw.toml"
    config.write_text(f'[middleware.usage]\nstore = "{postgres_url}"\nschema = "{schema}"\n')
    out = io.StringIO()
    assert await asyncio.to_thread(main, ["--config", str(config), "usage", "--format", "json",
                                          "--group-by", "user"], out) == 0
    found = json.loads(out.getvalue())
    assert [(r["user"], r["calls"], r["attempts"], r["cost_usd"], r["billed_unknown"]) for r in found] \
        == [("ada", 1, 2, 0.75, 0), ("bob", 1, 1, 0.0, 1)]


async def test_a_locked_table_is_a_store_outage_and_the_records_spill(
        schema: str, postgres_url: str, tmp_path: Path) -> None:
    store = PostgresUsageStore(postgres_url, PostgresOptions(schema=schema, statement_timeout_s=0.3))
    await store.write([record("before")])
    spill = SpillFile(tmp_path / "ledger.spill")
    journal = UsageJournal(store, spill=spill, retry_s=0.01)
    with psycopg.connect(postgres_url) as holder:
        holder.execute(f"LOCK TABLE {schema}.provmw_usage IN SHARE MODE")  # what a plain CREATE INDEX holds
        outcomes = await asyncio.gather(*(journal.durable(record(f"c{i}")) for i in range(16)))
        holder.rollback()
    await journal.aclose(timeout_s=5)
    assert set(outcomes) == {"spilled"} and journal.spilled == 16


@contextlib.contextmanager
def writer_role(postgres_url: str, schema: str) -> Iterator[str]:
    """A login role with only USAGE on ``schema`` and INSERT and SELECT on its ledger table: its URL."""
    role = f"writer_{schema[-12:]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        admin.execute(f"GRANT INSERT, SELECT ON {schema}.provmw_usage TO {role}")
    try:
        yield psycopg.conninfo.make_conninfo(postgres_url, user=role)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


async def test_a_role_with_only_insert_and_select_writes_to_an_existing_table(
        schema: str, postgres_url: str) -> None:
    owner = PostgresUsageStore(postgres_url, PostgresOptions(schema=schema))
    await owner.write([record("made-the-table")])
    await owner.aclose()
    with writer_role(postgres_url, schema) as url:
        writer = PostgresUsageStore(url, PostgresOptions(schema=schema))
        await writer.write([record("by-the-writer")])
        assert {r.call_id for r in await writer.records()} == {"made-the-table", "by-the-writer"}
        await writer.aclose()

OLD_TABLE = """
CREATE SCHEMA {schema};
CREATE TABLE {schema}.provmw_usage (
    call_id text NOT NULL, attempt bigint NOT NULL, correlation_id text NOT NULL,
    timestamp double precision NOT NULL, operation text NOT NULL, config_id text NOT NULL,
    provider text NOT NULL, model text NOT NULL, "user" text, tenant text, input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL, cached_input_tokens bigint NOT NULL, cache_write_5m_tokens bigint NOT NULL,
    cache_write_1h_tokens bigint NOT NULL, reasoning_tokens bigint NOT NULL, cost_usd double precision,
    latency_s double precision NOT NULL, status text NOT NULL, error_type text, billed text NOT NULL,
    PRIMARY KEY (call_id, attempt)
);
INSERT INTO {schema}.provmw_usage VALUES ('old', 1, 'old', 1700000000.0, 'chat', 'oa', 'openai', 'm', 'ada', NULL,
                                          5, 7, 0, 0, 0, 0, 0.25, 0.1, 'ok', NULL, 'yes');
"""


async def test_a_table_made_before_key_and_team_gains_them_keeping_its_rows(schema: str, postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(OLD_TABLE.format(schema=schema))
    store = PostgresUsageStore(postgres_url, PostgresOptions(schema=schema))
    await store.write([record("new", key_id="0123456789ab", team="acme/search")])
    found = {r.call_id: r for r in await store.records()}
    await store.aclose()
    assert (found["old"].input_tokens, found["old"].key_id, found["old"].team) == (5, None, None)
    assert (found["new"].key_id, found["new"].team) == ("0123456789ab", "acme/search")


async def test_a_role_that_may_not_add_the_new_columns_is_told_the_statement_to_run(
        schema: str, postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(OLD_TABLE.format(schema=schema))
    with writer_role(postgres_url, schema) as url:
        writer = PostgresUsageStore(url, PostgresOptions(schema=schema))
        with pytest.raises(PostgresUnavailableError, match=r"run once as its owner: ALTER TABLE .*ADD COLUMN IF NOT "
                                                           r"EXISTS \"key_id\" text"):
            await writer.write([record("by-the-writer")])
        await writer.aclose()
