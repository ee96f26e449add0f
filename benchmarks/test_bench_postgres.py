"""What recording to a fleet's ledger in PostgreSQL costs per record (PostgreSQL on loopback).

Each round writes 64 fresh records: 64 batches of 1 (a journal that writes each record as
its call ends) or one batch of 64 (group commit: the records of concurrent calls share one
transaction). Divide the round's time by 64 for the cost per call. SQLite is shown for
comparison. Skipped when no PostgreSQL answers at ``PROVMW_TEST_POSTGRES_URL``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from provmw.ci import service_missing
from provmw.stores.usage import SqliteUsageStore, UsageRecord, UsageStore

URL = os.environ.get("PROVMW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
RECORDS = 64
_numbers = itertools.count()


@pytest.fixture
def schema() -> Iterator[str]:
    try:
        psycopg.connect(URL, connect_timeout=2).close()
    except psycopg.Error as exc:
        service_missing(f"no PostgreSQL at {URL} ({exc})")
    name = f"provmw_bench_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(URL, autocommit=True) as connection:
        connection.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def fresh(count: int) -> list[UsageRecord]:
    return [UsageRecord(call_id=f"bench-{next(_numbers)}", attempt=1, correlation_id="bench", timestamp=1.7e9,
                        operation="chat", config_id="oa", provider="openai", model="gpt-4o-mini",
                        input_tokens=1200, output_tokens=300, cost_usd=0.00036) for _ in range(count)]


@pytest.mark.parametrize("batch", [1, 64])
@pytest.mark.parametrize("store", ["postgres", "sqlite"])
def test_record_64_calls(benchmark: Any, loop: asyncio.AbstractEventLoop, schema: str, tmp_path: Path,
                         store: str, batch: int) -> None:
    from provmw_postgres import PostgresOptions, PostgresUsageStore

    chosen: UsageStore = PostgresUsageStore(URL, PostgresOptions(schema=schema)) if store == "postgres" \
        else SqliteUsageStore(tmp_path / "u.db")

    async def round_of_64() -> None:
        records = fresh(RECORDS)
        for start in range(0, RECORDS, batch):
            await chosen.write(records[start:start + batch])

    loop.run_until_complete(chosen.write(fresh(1)))  # connect and create the table outside the timing
    benchmark.group = "usage ledger: record 64 calls (divide by 64 for one)"
    benchmark(lambda: loop.run_until_complete(round_of_64()))
    loop.run_until_complete(chosen.aclose())
