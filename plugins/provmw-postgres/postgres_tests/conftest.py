"""Fixtures for the tests against the real PostgreSQL: a schema of each test's own, dropped after it.

Under CI (``CI`` true-looking: ``true``, ``1``, ``yes``) a missing PostgreSQL fails these tests; elsewhere
they skip with the reason. ``PROVMW_TEST_POSTGRES_URL`` names the server (default 127.0.0.1:5432, ``test``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest

from provmw.ci import service_missing
from provmw.testing import FakeProvider

POSTGRES_URL = os.environ.get("PROVMW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def postgres_url() -> str:
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=2).close()
    except psycopg.Error as exc:
        service_missing(f"no PostgreSQL at {POSTGRES_URL} ({exc})")
    return POSTGRES_URL


@pytest.fixture
def schema(postgres_url: str) -> Iterator[str]:
    """A schema of this test's own (the store creates it); dropped with its tables afterwards."""
    name = f"provmw_test_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.fixture
async def fake() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as server:
        yield server


def rows(url: str, schema: str, query: str, table: str = "provmw_usage") -> list[tuple[object, ...]]:
    """The rows of ``query``, where ``{table}`` stands for the ledger table of ``schema``."""
    with psycopg.connect(url) as connection:
        return connection.execute(query.format(table=f"{schema}.{table}")).fetchall()
