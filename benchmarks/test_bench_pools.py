"""What a pool costs an attempt on the embedded state (``MemoryPoolState``), per strategy.

- ``choice``: reading the pool's view and choosing a deployment (the filter, then the strategy)
  over four measured deployments, with requests and tokens a minute (``+limits``) where the
  strategy reads them, and once for ``least_busy`` to show what the limits add to the filter.
  Goal: at most 10 us a call for every strategy.
- ``layer``: the pool layer's whole part of an attempt (read, choice, start, end) around an
  inner layer that answers at once.

1,000 calls a round; ``extra_info["per_call_us"]`` is the best round's time per call. The pool
variant of the end-to-end benchmark is the ``pool`` contender of ``test_bench_end_to_end.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from benchmarks.conftest import run_batch
from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.middleware.pool import PoolMiddleware, affinity_key
from provmw.pools import STRATEGIES, Pool
from provmw.responses import CompletionResponse
from provmw.stores.pools import MemoryPoolState
from provmw.testing import call_context

CALLS = 1_000
MEMBERS = ("a", "b", "c", "d")
NOW = 1_000_000.0


CHOICES = [*((s, False) for s in STRATEGIES if s != "headroom"), ("headroom", True), ("least_busy", True)]


def pool_of(strategy: str, limits: bool = True) -> Pool:
    rpm, tpm = (dict.fromkeys(MEMBERS, 10_000_000), dict.fromkeys(MEMBERS, 10**12)) if limits else ({}, {})
    return Pool(name="gpt", members=MEMBERS, strategy=strategy, weights={"a": 1, "b": 2, "c": 3, "d": 4},
                rpm=rpm, tpm=tpm)


def layer_of(pool: Pool) -> PoolMiddleware:
    configurations = {m: ProviderConfig(identifier=m, provider="openai", model=f"dep-{m}") for m in MEMBERS}
    return PoolMiddleware(pools={pool.name: pool}, configurations={**configurations, pool.name: pool.config()},
                          state=MemoryPoolState(), wall_clock=lambda: NOW)


def measured(layer: PoolMiddleware, pool: Pool, ctx: ProviderCallContext) -> None:
    """Every deployment measured (latency known, some calls this minute), the session kept with one."""

    async def warm() -> None:
        for i, member in enumerate(pool.members):
            key = affinity_key(pool, ctx) if member == "b" else None
            await layer.state.started(pool.name, member, key=key, tokens=100, now=NOW, key_ttl_s=3600)
            await layer.state.ended(pool.name, member, now=NOW, latency_s=0.1 * (i + 1), cooldown_until=None)

    asyncio.run(warm())


async def answer(config: ProviderConfig) -> CompletionResponse:
    return CompletionResponse(provider=config.provider, model=config.model, served_by=config.identifier, text="x")


@pytest.mark.parametrize(("strategy", "limits"), CHOICES, ids=[s + ("+limits" if lim else "") for s, lim in CHOICES])
def test_choice(benchmark: Any, loop: asyncio.AbstractEventLoop, strategy: str, limits: bool) -> None:
    pool, ctx = pool_of(strategy, limits), call_context(controls={"session": "s1"})
    layer = layer_of(pool)
    measured(layer, pool, ctx)
    key = affinity_key(pool, ctx) if strategy == "affinity" else None

    async def choice() -> str:
        view = await layer.state.read(pool.name, pool.members, key, NOW)
        return layer._chosen(pool, ctx, view, set(), 100, NOW)

    benchmark.group = "pool choice"
    benchmark(run_batch(loop, choice, CALLS))
    if benchmark.stats is not None:
        benchmark.extra_info["per_call_us"] = benchmark.stats.stats.min / CALLS * 1e6


@pytest.mark.parametrize("strategy", ["least_busy", "latency", "affinity"])
def test_layer(benchmark: Any, loop: asyncio.AbstractEventLoop, strategy: str) -> None:
    pool, ctx = pool_of(strategy, limits=False), call_context(controls={"session": "s1"})
    layer = layer_of(pool)
    measured(layer, pool, ctx)
    config = pool.config()
    benchmark.group = "pool layer"
    benchmark(run_batch(loop, lambda: layer.handle(ctx, config, answer), CALLS))
    if benchmark.stats is not None:
        benchmark.extra_info["per_call_us"] = benchmark.stats.stats.min / CALLS * 1e6
