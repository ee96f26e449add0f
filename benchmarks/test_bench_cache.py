"""A cache hit through the full default stack. Goal: under 30 µs per hit on this machine.

1. ``pipeline.run`` with every built-in middleware, the answer already cached, against the
   empty pipeline passing straight to a terminal that returns a canned response.
2. ``manager.embed`` end to end (request, context, cache key, pipeline), a hit every time,
   against the same call with the cache switched off and the terminal never reached
   (the manager's own cost floor would need a provider; see test_bench_adapter for it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks.conftest import run_batch
from provmw.config import ProviderConfig
from provmw.context import ProviderOperation
from provmw.manager import ServiceManager
from provmw.middleware import builtin_middleware
from provmw.pipeline import MiddlewarePipeline
from provmw.plugins import PluginHost, PluginPolicy
from provmw.responses import EmbeddingResponse
from provmw.settings import Settings
from provmw.state import State
from provmw.testing import FakeProvider, call_context

CALLS = 1_000
CONFIG = ProviderConfig(identifier="bench", provider="openai", model="m")
RESPONSE = EmbeddingResponse(provider="openai", model="m", vectors=[[0.1] * 8])
CTX = call_context(ProviderOperation.EMBEDDING, digest="b" * 64, deterministic=True)


async def terminal(config: ProviderConfig) -> EmbeddingResponse:
    return RESPONSE


@pytest.mark.parametrize("stack", ["empty pipeline, pass-through", "built-in stack, cache hit"])
def test_pipeline_cache_hit(benchmark: Any, loop: asyncio.AbstractEventLoop, stack: str) -> None:
    pipeline = MiddlewarePipeline(builtin_middleware(Settings(), State()) if stack.startswith("built-in") else [])
    loop.run_until_complete(pipeline.run(CTX, CONFIG, terminal))  # fill the cache
    benchmark.group = "cache hit, pipeline level, 1,000 calls"
    benchmark(run_batch(loop, lambda: pipeline.run(CTX, CONFIG, terminal), CALLS))


@pytest.fixture
def manager(loop: asyncio.AbstractEventLoop) -> Iterator[ServiceManager]:
    fake = loop.run_until_complete(FakeProvider().start())
    config = ProviderConfig(identifier="e", provider="openai", model="emb", base_url=fake.openai_base_url)
    built = ServiceManager(Settings(configurations={"e": config}),
                           host=PluginHost(PluginPolicy(autoload=False), environ={}))
    loop.run_until_complete(built.embed("warm the cache", tenant="acme"))
    yield built
    loop.run_until_complete(built.aclose())
    loop.run_until_complete(fake.stop())


def test_manager_embed_cache_hit(benchmark: Any, loop: asyncio.AbstractEventLoop, manager: ServiceManager) -> None:
    async def hit() -> None:
        response = await manager.embed("warm the cache", tenant="acme")
        assert response.cached

    benchmark.group = "cache hit, manager.embed end to end, 1,000 calls"
    benchmark(run_batch(loop, hit, CALLS))
