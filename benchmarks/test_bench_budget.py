"""What budgets and the usage ledger add to a call.

1. ``budget`` with one global limit: reserve before, settle after, per call, on the
   memory store and on the SQLite store (two committed transactions with
   ``synchronous=FULL`` per call), against no budget layer. 200 calls per round.
2. ``usage`` recording each attempt into its journal, each call waiting until its record
   is committed (one at a time here: sequential calls get no group commit), on a memory
   and a SQLite ledger, against no usage layer. 1,000 calls per round.
   ``test_bench_ledger.py`` measures the same through a manager, at concurrency 1 and 64.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from benchmarks.conftest import run_batch
from provmw.config import ProviderConfig
from provmw.middleware.budget import BudgetMiddleware, BudgetOptions
from provmw.middleware.usage import UsageMiddleware
from provmw.pipeline import Middleware, MiddlewarePipeline
from provmw.responses import CompletionResponse, Usage
from provmw.stores.embedded import EmbeddedState, SqliteFile
from provmw.stores.usage.journal import UsageJournal
from provmw.testing import call_context

CONFIG = ProviderConfig(identifier="bench", provider="openai", model="m")
RESPONSE = CompletionResponse(provider="openai", model="m", text="x",
                              usage=Usage(input_tokens=10, output_tokens=5, cost_usd=0.00001))
CTX = call_context(planned_cost_usd=0.0001, estimated_input_tokens=10, max_output_tokens=20)


async def terminal(config: ProviderConfig) -> CompletionResponse:
    return RESPONSE


@pytest.mark.parametrize("store", ["none", "memory", "sqlite"])
def test_budget_reserve_and_settle(benchmark: Any, loop: asyncio.AbstractEventLoop, tmp_path: Path,
                                   store: str) -> None:
    layers: list[Middleware] = []
    if store != "none":
        limit = {"scope": "global", "period": "day", "max_cost_usd": 1e9}
        file = SqliteFile(str(tmp_path / "b.db")) if store == "sqlite" else None
        layers.append(BudgetMiddleware(BudgetOptions(limits=[limit]), store=EmbeddedState(budgets=file).budget_store()))
    pipeline = MiddlewarePipeline(layers)
    benchmark.group = "budget reserve + settle, 200 calls"
    benchmark(run_batch(loop, lambda: pipeline.run(CTX, CONFIG, terminal), 200))


@pytest.mark.parametrize("store", ["none", "memory", "sqlite"])
def test_usage_recording(benchmark: Any, loop: asyncio.AbstractEventLoop, tmp_path: Path, store: str) -> None:
    layers: list[Middleware] = []
    usage = None
    if store != "none":
        file = SqliteFile(str(tmp_path / "u.db")) if store == "sqlite" else None
        usage = UsageMiddleware(journal=UsageJournal(EmbeddedState(ledger=file).usage_store()))
        layers.append(usage)
    pipeline = MiddlewarePipeline(layers)

    async def round_() -> None:
        for _ in range(1_000):
            await pipeline.run(CTX, CONFIG, terminal)
        if usage is not None:
            await usage.journal.flush()

    benchmark.group = "usage ledger, 1,000 calls (flushed)"
    benchmark(lambda: loop.run_until_complete(round_()))
