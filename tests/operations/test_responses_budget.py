"""Responses calls against a strict budget and under faults: never past the limit, one ledger row a request."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from provmw.errors import BudgetExceededError, ConfigurationError, ProvmwError
from provmw.manager import ServiceManager
from provmw.operations.responses_api import ResponsesResponse
from provmw.plugins import PluginHost
from provmw.responses import ChatChunk
from provmw.settings import Settings
from provmw.stores.usage import SqliteUsageStore
from provmw.testing import FakeProvider, Fault
from tests.budget_sampling import peak_cost_while
from tests.conftest import openai_config

LIMIT_MICRO_USD = 1_000_000
PRICE = {"input_usd_per_mtok": 100.0, "output_usd_per_mtok": 1000.0, "max_output_tokens": 1000}


def settings(fake: FakeProvider, path: Path, **middleware: object) -> Settings:
    config = openai_config(fake, price=PRICE, options={"max_tokens": 10})
    return Settings(configurations={"oa": config}, middleware={
        "budget": {"path": str(path), "limits": [{"scope": "global", "period": "total", "max_cost_usd": 1.0}]},
        "usage": {"path": str(path)}, **middleware})


async def call(manager: ServiceManager, i: int) -> ResponsesResponse | list[ChatChunk] | ProvmwError:
    try:
        if i % 2:
            return [c async for c in manager.stream_respond(f"stream call {i}")]
        return await manager.respond(f"unary call {i}")
    except ProvmwError as exc:
        return exc


def cost(outcome: ResponsesResponse | list[ChatChunk]) -> float:
    usage = outcome.usage if isinstance(outcome, ResponsesResponse) else outcome[-1].usage
    assert usage is not None
    return usage.cost_usd or 0.0


async def ledger_records(path: Path) -> list[object]:
    ledger = SqliteUsageStore(path)
    records = await ledger.records()
    await ledger.aclose()
    return list(records)


async def test_concurrent_responses_never_commit_or_reserve_past_a_strict_limit(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    async with ServiceManager(settings(fake, tmp_path / "ledger.sqlite3"), host=builtin_only) as manager:
        store = manager.state.budget_store()
        outcomes, peak = await peak_cost_while(store, asyncio.gather(*(call(manager, i) for i in range(600))),
                                               every_s=0)
        [bucket] = await store.states(now=time.time())
    served = [o for o in outcomes if not isinstance(o, ProvmwError)]
    assert all(isinstance(o, BudgetExceededError) for o in outcomes if isinstance(o, ProvmwError))
    assert len(served) >= 50 and peak <= LIMIT_MICRO_USD
    reported = sum(cost(o) for o in served)
    records = await ledger_records(tmp_path / "ledger.sqlite3")
    assert len(records) == len(served) == fake.count(route="responses")
    assert bucket.spent.cost_micro_usd == round(reported * 1e6) and bucket.reserved.cost_micro_usd == 0


async def test_under_faults_the_ledger_has_one_row_per_request_sent(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    fake.fail_randomly(0.3, Fault(status=500), route="responses", seed=7)
    quick = {"retry": {"base_s": 0.001, "max_wait_s": 0.001}, "circuit_breaker": {"enabled": False}}
    async with ServiceManager(settings(fake, tmp_path / "ledger.sqlite3", **quick), host=builtin_only) as manager:
        outcomes = await asyncio.gather(*(call(manager, i) for i in range(40)))
    records = await ledger_records(tmp_path / "ledger.sqlite3")
    assert len(records) == fake.count(route="responses") > 40
    assert sum(not isinstance(o, ProvmwError) for o in outcomes) >= 30


def priced_searches(fake: FakeProvider, path: Path) -> Settings:
    """A strict $1 limit, and a web search at $0.40 a call."""
    config = openai_config(fake, price={**PRICE, "units": {"web_search_call": 0.4}}, options={"max_tokens": 10})
    return Settings(configurations={"oa": config}, middleware={
        "budget": {"path": str(path), "limits": [{"scope": "global", "period": "total", "max_cost_usd": 1.0}]}})


async def test_a_strict_limit_refuses_built_in_tools_without_max_tool_calls_before_sending(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    async with ServiceManager(priced_searches(fake, tmp_path / "b.sqlite3"), host=builtin_only) as manager:
        with pytest.raises(ConfigurationError, match="cannot be known before it is sent: its built-in tools"):
            await manager.respond("weather?", builtin_tools=["web_search"])
    assert fake.count(route="responses") == 0


async def test_a_strict_limit_refuses_built_in_tools_even_with_max_tool_calls(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    # Their fees are bounded by max_tool_calls, but their results come back as input tokens nothing bounds.
    async with ServiceManager(priced_searches(fake, tmp_path / "b.sqlite3"), host=builtin_only) as manager:
        with pytest.raises(ConfigurationError, match="results .* are read as input tokens"):
            await manager.respond("weather?", builtin_tools=["web_search"], options={"max_tool_calls": 2})
    assert fake.count(route="responses") == 0
