"""What the reliability stack costs when nothing goes wrong, and how fast a long hint fails over.

1. The built-in middleware on their happy path (no deadline set, no rate limit configured,
   breaker closed, first attempt succeeds, budget without limits, usage on a memory
   ledger) against an empty pipeline, 1,000 calls per round, terminal returning a canned
   response. ``test_bench_budget.py`` measures budgets and the ledger on their own.
2. Over real HTTP to the fake provider: a call whose primary answers 429 with
   ``retry-after: 120`` (over the cap) and is served by the fallback, against a plain call.
   Goal: the failover adds well under 50 ms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks.conftest import run_batch
from provmw.config import ProviderConfig
from provmw.manager import ServiceManager
from provmw.middleware import builtin_middleware
from provmw.pipeline import MiddlewarePipeline
from provmw.plugins import PluginHost, PluginPolicy
from provmw.responses import CompletionResponse
from provmw.settings import Settings
from provmw.state import open_state
from provmw.testing import FakeProvider, Fault, call_context

CALLS = 1_000
CONFIG = ProviderConfig(identifier="bench", provider="openai", model="m")
RESPONSE = CompletionResponse(provider="openai", model="m", text="x")
CTX = call_context(estimated_input_tokens=3)


async def terminal(config: ProviderConfig) -> CompletionResponse:
    return RESPONSE


@pytest.mark.parametrize("stack", ["empty", "built-in"])
def test_happy_path_overhead(benchmark: Any, loop: Any, stack: str) -> None:
    settings = Settings(middleware={"usage": {"store": "memory"}, "usage_hits": {"enabled": False}})
    middlewares = builtin_middleware(settings, open_state(settings)) if stack == "built-in" else []
    pipeline = MiddlewarePipeline(middlewares)
    benchmark.group = "reliability stack, happy path, 1,000 calls"
    benchmark(run_batch(loop, lambda: pipeline.run(CTX, CONFIG, terminal), CALLS))


@pytest.fixture
def served(loop: asyncio.AbstractEventLoop) -> Iterator[tuple[FakeProvider, ServiceManager]]:
    fake = loop.run_until_complete(FakeProvider().start())
    configurations = {
        "primary": ProviderConfig(identifier="primary", provider="openai", model="p", base_url=fake.openai_base_url,
                                  fallbacks=("backup",)),
        "backup": ProviderConfig(identifier="backup", provider="anthropic", model="b",
                                 base_url=fake.anthropic_base_url),
    }
    manager = ServiceManager(Settings(configurations=configurations, default="primary"),
                             host=PluginHost(PluginPolicy(autoload=False), environ={}))
    yield fake, manager
    loop.run_until_complete(manager.aclose())
    loop.run_until_complete(fake.stop())


@pytest.mark.parametrize("case", ["plain call to the backup", "429 retry-after 120 on the primary"])
def test_failover_on_a_long_hint(benchmark: Any, loop: Any, served: tuple[FakeProvider, ServiceManager],
                                 case: str) -> None:
    fake, manager = served
    failing = case.startswith("429")

    async def call() -> None:
        if failing:
            fake.script(Fault(status=429, headers={"retry-after": "120"}), model="p")
            response = await manager.chat("hi")
        else:
            response = await manager.chat("hi", configuration="backup")
        assert response.served_by == "backup"

    benchmark.group = "failover on a retry-after over the cap (one call)"
    benchmark(lambda: loop.run_until_complete(call()))
