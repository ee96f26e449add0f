"""The gateway's key store in PostgreSQL: the key store contract, a fleet's hosts seeing each other's
changes, no secret in any row, and ``--keys postgresql://...`` reaching it."""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from provmw_postgres import PostgresKeyOptions, PostgresKeyStore, PostgresKeysUnavailableError, provmw_key_store

from postgres_tests.proxy import TcpProxy
from provmw.cli import main
from provmw.errors import ConfigurationError
from provmw.gateway import KeyCache
from provmw.gateway.conformance import KeyStoreConformance
from provmw.gateway.keys import KeyStore

pytestmark = pytest.mark.postgres

DOWN = "postgresql://keys:pg-s3cret@127.0.0.1:1/test"  # nothing listens on port 1
HANG_GUARD_S = 30.0


@pytest.fixture
def schemas(postgres_url: str) -> Iterator[str]:
    """A prefix for the schemas of this test's stores; every schema under it is dropped afterwards."""
    prefix = f"provmw_test_{uuid.uuid4().hex[:12]}"
    yield prefix
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        found = connection.execute("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (prefix,))
        for (name,) in found.fetchall():
            connection.execute(f"DROP SCHEMA {name} CASCADE")


class TestPostgresKeyStore(KeyStoreConformance):
    @pytest.fixture(autouse=True)
    def _schemas(self, schemas: str, postgres_url: str) -> None:
        self.prefix, self.url = schemas, postgres_url

    async def open_store(self, name: str) -> KeyStore:
        return PostgresKeyStore(self.url, PostgresKeyOptions(schema=f"{self.prefix}_{name}"))


@pytest.fixture
async def hosts(postgres_url: str, schema: str) -> AsyncIterator[tuple[PostgresKeyStore, PostgresKeyStore]]:
    """Two store objects on one database, as two hosts of a fleet have."""
    first, second = (PostgresKeyStore(postgres_url, PostgresKeyOptions(schema=schema)) for _ in range(2))
    yield first, second
    await first.aclose()
    await second.aclose()


async def test_a_key_disabled_on_one_host_is_refused_by_another_once_its_cache_expires(
        hosts: tuple[PostgresKeyStore, PostgresKeyStore]) -> None:
    first, second = hosts
    now = [0.0]
    cache = KeyCache(second, ttl_s=2.0, clock=lambda: now[0])
    whole, record = await first.create("acme")
    assert not (await cache.verify(whole)).disabled  # type: ignore[union-attr]
    await first.disable(record.key_id)
    now[0] += 2.5
    assert (await cache.verify(whole)).disabled  # type: ignore[union-attr]


async def test_a_budget_set_on_one_host_applies_on_another(hosts: tuple[PostgresKeyStore, PostgresKeyStore]) -> None:
    first, second = hosts
    _, record = await first.create("acme", team="search")
    await second.set_budget("team", "acme/search", "day", max_requests=5)
    assert [b.max_requests for b in await first.budgets_for(record)] == [5]


async def test_two_hosts_rotating_one_key_at_once_make_one_successor(
        hosts: tuple[PostgresKeyStore, PostgresKeyStore]) -> None:
    first, second = hosts
    _, old = await first.create("acme")
    await second.list()  # both connected, so that the two rotations do meet
    outcomes = await asyncio.gather(first.rotate(old.key_id), second.rotate(old.key_id), return_exceptions=True)
    assert sorted(type(o).__name__ for o in outcomes) == ["ConfigurationError", "tuple"]
    assert [r.disabled for r in await second.list("acme")] == [True, False]


async def test_no_row_holds_a_keys_secret(postgres_url: str, schema: str,
                                          hosts: tuple[PostgresKeyStore, PostgresKeyStore]) -> None:
    first, _ = hosts
    whole, record = await first.create("acme", team="t", user="u", models=["m"], name="n")
    await first.set_budget("key", record.key_id, "day", max_requests=1)
    rotated, _ = await first.rotate(record.key_id)
    with psycopg.connect(postgres_url) as connection:
        stored = [str(row) for table in ("provmw_keys", "provmw_key_budgets", "provmw_key_responses")
                  for row in connection.execute(f"SELECT t::text FROM {schema}.{table} t").fetchall()]
    assert len(stored) == 4
    for key in (whole, rotated):
        assert not any(key.rsplit("_", 1)[1] in row for row in stored)


async def test_an_id_or_organisation_postgresql_cannot_hold_is_simply_unknown(
        hosts: tuple[PostgresKeyStore, PostgresKeyStore]) -> None:
    first, _ = hosts
    assert await first.get("0123\x00") is None
    assert await first.list("ac\x00me") == []
    with pytest.raises(ConfigurationError, match="no virtual key"):
        await first.disable("0123\x00")


async def test_an_unreachable_database_is_a_typed_error_without_the_password() -> None:
    store = PostgresKeyStore(DOWN, PostgresKeyOptions(connect_timeout_s=2))
    with pytest.raises(PostgresKeysUnavailableError) as caught:
        await store.get("0123456789ab")
    await store.aclose()
    assert "pg-s3cret" not in str(caught.value) and "***" in str(caught.value)


async def test_a_silent_database_is_unavailable_within_the_bound_then_the_store_recovers(
        postgres_url: str, schema: str) -> None:
    async with TcpProxy() as proxy:
        store = PostgresKeyStore(proxy.url(), PostgresKeyOptions(schema=schema, statement_timeout_s=0.5))
        _, record = await store.create("acme")
        proxy.mode = "silent"
        async with asyncio.timeout(HANG_GUARD_S):  # stops a hang; the store's own bound is what is tested
            with pytest.raises(PostgresKeysUnavailableError, match="no answer"):
                await store.get(record.key_id)
        proxy.mode = "forward"
        assert await store.get(record.key_id) == record
        await store.aclose()


def test_the_plugin_serves_postgresql_urls_only() -> None:
    assert isinstance(provmw_key_store("postgresql://h/db", {"schema": "gateway"}), PostgresKeyStore)
    assert provmw_key_store("redis://h/0", {}) is None


def test_provmw_keys_creates_and_lists_keys_in_postgresql(postgres_url: str, schema: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
    monkeypatch.setenv("PGOPTIONS", f"-c search_path={schema}")  # where the tables go without a schema option
    out = io.StringIO()
    assert main(["keys", "create", "--organisation", "acme", "--keys", postgres_url], out=out) == 0
    whole = out.getvalue().split("\n", 1)[0]
    listed = io.StringIO()
    assert main(["keys", "list", "--format", "json", "--keys", postgres_url], out=listed) == 0
    assert whole.split("_")[1] in listed.getvalue()
