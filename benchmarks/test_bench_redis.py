"""What the Redis-backed state adds to a call, against the embedded stores (Redis on loopback).

1. ``budget`` with one global limit: reserve before and settle after, one Lua script round
   trip each, against the memory and SQLite stores. 200 calls per round.
2. A cache hit through the ``cache`` layer: one GET (plus an HMAC check when signing is on),
   against the memory store. 200 calls per round.

Skipped when no Redis answers at ``PROVMW_TEST_REDIS_URL`` (default 127.0.0.1:6379); failed instead under CI.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from benchmarks.conftest import run_batch
from benchmarks.test_bench_budget import CONFIG, CTX, terminal
from provmw.ci import service_missing
from provmw.context import ProviderOperation
from provmw.middleware.budget import BudgetMiddleware, BudgetOptions
from provmw.middleware.cache import CacheMiddleware, CacheOptions
from provmw.pipeline import MiddlewarePipeline
from provmw.responses import EmbeddingResponse
from provmw.stores.budgets import BudgetStore
from provmw.stores.cache import CacheStore, MemoryCacheStore
from provmw.stores.embedded import EmbeddedState, SqliteFile
from provmw.stores.shared import StateSettings
from provmw.testing import call_context

URL = os.environ.get("PROVMW_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
CALLS = 200
LIMIT = {"scope": "global", "period": "day", "max_cost_usd": 1e9}
HIT = call_context(ProviderOperation.EMBEDDING, digest="bench", deterministic=True)
VECTORS = EmbeddingResponse(provider="openai", model="m", vectors=((0.1,) * 1536,))


@pytest.fixture
def prefix(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    client = redis.Redis.from_url(URL)
    try:
        client.ping()
    except redis.RedisError as exc:
        service_missing(f"no Redis at {URL} ({exc})")
    monkeypatch.setenv("PROVMW_BENCH_SIGNING_KEY", "bench-secret-of-enough-characters")
    name = f"provmw-bench-{uuid.uuid4().hex[:12]}"
    yield name
    keys = list(client.scan_iter(match=f"*{name}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def redis_state(prefix: str, shared: tuple[str, ...] = ("cache",), **options: Any) -> Any:
    from provmw_redis import RedisState

    return RedisState(StateSettings(URL, shared, options={"key_prefix": prefix, **options}))


@pytest.mark.parametrize("store", ["memory", "sqlite", "redis"])
def test_budget_reserve_and_settle(benchmark: Any, loop: asyncio.AbstractEventLoop, tmp_path: Path, prefix: str,
                                   store: str) -> None:
    file = SqliteFile(str(tmp_path / "b.db")) if store == "sqlite" else None
    chosen: BudgetStore = redis_state(prefix, ("budget",)).budget_store() if store == "redis" else \
        EmbeddedState(budgets=file).budget_store()
    pipeline = MiddlewarePipeline([BudgetMiddleware(BudgetOptions(limits=[LIMIT]), store=chosen)])
    benchmark.group = "shared state: budget reserve + settle, 200 calls"
    benchmark(run_batch(loop, lambda: pipeline.run(CTX, CONFIG, terminal), CALLS))


@pytest.mark.parametrize("store", ["memory", "redis", "redis, signed"])
def test_cache_hit(benchmark: Any, loop: asyncio.AbstractEventLoop, prefix: str, store: str) -> None:
    signing = {"signing_key_env": "PROVMW_BENCH_SIGNING_KEY"} if store.endswith("signed") else \
        {"unsigned_cache": True}
    chosen: CacheStore = MemoryCacheStore() if store == "memory" else redis_state(prefix, **signing).cache_store()
    pipeline = MiddlewarePipeline([CacheMiddleware(CacheOptions(), store=chosen)])

    async def embedding(config: Any) -> EmbeddingResponse:
        return VECTORS

    loop.run_until_complete(pipeline.run(HIT, CONFIG, embedding))  # fill
    benchmark.group = "shared state: cache hit (1,536 floats), 200 calls"
    benchmark(run_batch(loop, lambda: pipeline.run(HIT, CONFIG, terminal), CALLS))
