"""A strict budget counts every attempt that was sent (ADR 0040), over real HTTP: one never sent costs
nothing, one answered its usage, one whose usage is unknown its reservation; later attempts reserve."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Any

import pytest

from provmw.errors import BudgetExceededError, MalformedResponseError, ProviderError
from provmw.manager import ServiceManager
from provmw.messages import messages_from
from provmw.plugins import PluginHost
from provmw.requests import ChatRequest
from provmw.settings import Settings
from provmw.stores.budgets import BucketState
from provmw.stores.usage import SqliteUsageStore, UsageRecord
from provmw.testing import FakeProvider, Fault
from tests.conftest import openai_config

PRICE = {"input_usd_per_mtok": 100.0, "output_usd_per_mtok": 1000.0, "max_output_tokens": 1000}
QUICK = {"base_s": 0.001, "max_wait_s": 0.001}


def settings(fake: FakeProvider, path: Path, *, limit_usd: float = 1.0, retry: dict[str, Any] | None = None,
             base_url: str | None = None) -> Settings:
    config = openai_config(fake, price=PRICE, options={"max_tokens": 10}, base_url=base_url or fake.openai_base_url)
    return Settings(configurations={"oa": config}, middleware={
        "budget": {"path": str(path), "limits": [{"scope": "global", "period": "total", "max_cost_usd": limit_usd}]},
        "usage": {"path": str(path)}, "retry": {**QUICK, **(retry or {})}, "circuit_breaker": {"enabled": False}})


def reservation(manager: ServiceManager, text: str, *, stream: bool = False) -> int:
    """What one attempt of a chat with ``text`` reserves, in micro-dollars (the strict worst case)."""
    from provmw._call.arguments import CallArguments
    from provmw.context import ProviderOperation

    _, ctx = manager._facts(ProviderOperation.CHAT, ChatRequest(messages_from(text)), CallArguments(), stream=stream)
    assert ctx.facts.planned_cost_usd is not None
    return math.ceil(ctx.facts.planned_cost_usd * 1e6)


async def bucket(manager: ServiceManager) -> BucketState:
    [state] = await manager.state.budget_store().states(now=time.time())
    return state


async def ledger(path: Path) -> list[UsageRecord]:
    store = SqliteUsageStore(path)
    try:
        return sorted(await store.records(), key=lambda r: r.attempt)
    finally:
        await store.aclose()


async def test_an_attempt_that_timed_out_after_sending_costs_its_reservation(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    fake.script(Fault(delay_s=0.5))
    async with ServiceManager(settings(fake, tmp_path / "l.sqlite3", retry={"max_attempts": 1}),
                              host=builtin_only) as manager:
        with pytest.raises(ProviderError):
            await manager.chat("hello", controls={"attempt_timeout_s": 0.05})
        state = await bucket(manager)
        assert (state.spent.cost_micro_usd, state.reserved.cost_micro_usd) == (reservation(manager, "hello"), 0)
    assert [r.billed for r in await ledger(tmp_path / "l.sqlite3")] == ["unknown"]


async def test_a_2xx_body_that_does_not_parse_is_billed_unknown_and_costs_its_reservation(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    fake.script(Fault(malformed_json=True))
    async with ServiceManager(settings(fake, tmp_path / "l.sqlite3", retry={"max_attempts": 1}),
                              host=builtin_only) as manager:
        with pytest.raises(MalformedResponseError):
            await manager.chat("hello")
        assert (await bucket(manager)).spent.cost_micro_usd == reservation(manager, "hello")
    assert [r.billed for r in await ledger(tmp_path / "l.sqlite3")] == ["unknown"]


async def test_an_error_status_costs_nothing_and_a_retried_answer_its_usage(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    fake.script(Fault(status=500))
    async with ServiceManager(settings(fake, tmp_path / "l.sqlite3"), host=builtin_only) as manager:
        answer = await manager.chat("hello")
        state = await bucket(manager)
    assert answer.usage.cost_usd is not None and len(answer.attempts) == 2
    assert (state.spent.cost_micro_usd, state.spent.requests) == (math.ceil(answer.usage.cost_usd * 1e6), 1)


async def test_a_retry_after_an_unknown_attempt_pays_both(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    fake.script(Fault(malformed_json=True))
    async with ServiceManager(settings(fake, tmp_path / "l.sqlite3"), host=builtin_only) as manager:
        answer = await manager.chat("hello")
        state = await bucket(manager)
        first = reservation(manager, "hello")
    assert answer.usage.cost_usd is not None
    assert state.spent.cost_micro_usd == first + math.ceil(answer.usage.cost_usd * 1e6)
    assert (state.spent.requests, state.reserved.cost_micro_usd) == (1, 0)


async def test_a_further_attempt_that_does_not_fit_is_refused_before_it_is_sent(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    async with ServiceManager(settings(fake, tmp_path / "l.sqlite3"), host=builtin_only) as manager:
        one = reservation(manager, "hello")
    fake.script(Fault(malformed_json=True))
    async with ServiceManager(settings(fake, tmp_path / "l.sqlite3", limit_usd=(one * 1.5) / 1e6),
                              host=builtin_only) as manager:
        with pytest.raises(BudgetExceededError):
            await manager.chat("hello")
        state = await bucket(manager)
    assert (fake.count(), state.spent.cost_micro_usd, state.reserved.cost_micro_usd) == (1, one, 0)


async def test_an_attempt_never_sent_costs_nothing(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path, unused_tcp_port: int) -> None:
    closed = f"http://127.0.0.1:{unused_tcp_port}/v1"
    async with ServiceManager(settings(fake, tmp_path / "l.sqlite3", retry={"max_attempts": 1}, base_url=closed),
                              host=builtin_only) as manager:
        with pytest.raises(ProviderError):
            await manager.chat("hello")
        state = await bucket(manager)
    assert (state.spent.cost_micro_usd, state.spent.requests, state.reserved.cost_micro_usd) == (0, 0, 0)


async def test_a_cancelled_caller_pays_the_attempt_it_sent(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    fake.script(Fault(delay_s=5))
    async with ServiceManager(settings(fake, tmp_path / "l.sqlite3"), host=builtin_only) as manager:
        call = asyncio.create_task(manager.chat("hello"))
        for _ in range(1000):  # until the request reached the provider
            if fake.count():
                break
            await asyncio.sleep(0.005)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        state = await bucket(manager)
        assert (state.spent.cost_micro_usd, state.reserved.cost_micro_usd) == (reservation(manager, "hello"), 0)


async def test_an_answer_reporting_output_above_max_tokens_is_malformed_and_settled_at_its_reservation(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    fake.script(Fault(usage={"prompt_tokens": 3, "completion_tokens": 2**40 - 1}))
    async with ServiceManager(settings(fake, tmp_path / "l.sqlite3", retry={"max_attempts": 1}),
                              host=builtin_only) as manager:
        with pytest.raises(MalformedResponseError, match="above the call's bound of 10"):
            await manager.chat("hello")
        assert (await bucket(manager)).spent.cost_micro_usd == reservation(manager, "hello")


async def test_calls_under_half_a_micro_dollar_are_never_free(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    config = openai_config(fake, model="embed-test", price={"input_usd_per_mtok": 0.02})
    limits = [{"scope": "global", "period": "total", "max_cost_usd": 0.00001}]  # 10 micro-dollars
    served = 0
    async with ServiceManager(Settings(configurations={"oa": config}, middleware={
            "budget": {"path": str(tmp_path / "l.sqlite3"), "limits": limits},
            "usage": {"path": str(tmp_path / "l.sqlite3")}}), host=builtin_only) as manager:
        for i in range(15):
            try:
                await manager.embed(f"x{i}")  # each its own: the cache would answer a repeat
                served += 1
            except BudgetExceededError:
                pass
        state = await bucket(manager)
    assert (served, state.spent.cost_micro_usd) == (10, 10)


class TwoAtOnce:
    """A plugin's layer above the budget that runs the rest of the stack twice at once (a hedge)."""

    name = "two_at_once"
    priority = 750

    async def handle(self, ctx: Any, config: Any, next: Any) -> Any:
        first, _ = await asyncio.gather(next(config), next(config))
        return first


async def test_two_passes_run_at_once_above_the_budget_are_each_charged_once(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    async with ServiceManager(settings(fake, tmp_path / "l.sqlite3"), host=builtin_only,
                              middleware=[TwoAtOnce()]) as manager:
        await manager.chat("hello")
        state = await bucket(manager)
    costs = [r.cost_usd for r in await ledger(tmp_path / "l.sqlite3")]
    assert len(costs) == 2 and None not in costs
    assert state.spent.cost_micro_usd == sum(math.ceil(round((c or 0) * 1e6, 3)) for c in costs)


async def test_a_stream_reporting_output_above_max_tokens_is_settled_at_an_estimate(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    fake.script(Fault(usage={"prompt_tokens": 3, "completion_tokens": 2**40 - 1}))
    async with ServiceManager(settings(fake, tmp_path / "l.sqlite3"), host=builtin_only) as manager:
        chunks = [c async for c in manager.stream_chat("hello")]
        state = await bucket(manager)
    [record] = await ledger(tmp_path / "l.sqlite3")
    assert chunks and record.billed == "estimated" and record.output_tokens <= 10
    assert state.spent.cost_micro_usd == math.ceil(round((record.cost_usd or 0) * 1e6, 3))


async def test_without_max_tokens_the_models_ceiling_bounds_what_an_answer_may_report(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    fake.script(Fault(usage={"prompt_tokens": 3, "completion_tokens": 1001}))  # PRICE's ceiling: 1000
    config = openai_config(fake, price=PRICE)
    async with ServiceManager(Settings(configurations={"oa": config}, middleware={
            "usage": {"store": "memory"}, "retry": {"max_attempts": 1}}), host=builtin_only) as manager:
        with pytest.raises(MalformedResponseError, match="above the call's bound of 1000"):
            await manager.chat("hello")
