"""The idempotency middleware: a repeated key gets the first answer, charged once; repeats wait."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import ConfigurationError, ProviderUnavailableError
from provmw.manager import ServiceManager
from provmw.middleware.idempotency import IdempotencyMiddleware, IdempotencyOptions
from provmw.plugins import PluginHost
from provmw.responses import CompletionResponse, Usage
from provmw.settings import Settings
from provmw.stores.cache import MemoryCacheStore
from provmw.stores.outage import GuardedCache
from provmw.testing import FakeClock, FakeProvider, Fault, ScriptedNext, call_context
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, openai_config

CONFIG = ProviderConfig(identifier="p", provider="openai", model="m")
ANSWER = CompletionResponse(provider="openai", model="m", text="42", finish_reason="length",
                            usage=Usage(input_tokens=3, output_tokens=2, cost_usd=0.5))


def ctx(key: str | None = "k", request: str = "r1", tenant: str = "acme") -> ProviderCallContext:
    return call_context(idempotency_key=key, digest=request, tenant=tenant)


async def test_a_repeat_gets_the_first_answer_without_a_second_request() -> None:
    middleware, upstream = IdempotencyMiddleware(), ScriptedNext(ANSWER)
    first = await middleware.handle(ctx(), CONFIG, upstream)
    again = await middleware.handle(ctx(), CONFIG, upstream)
    assert len(upstream.calls) == 1 and again.text == first.text == "42"
    assert (again.cached, again.usage.cost_usd, again.usage.saved_cost_usd) == (True, 0.0, 0.5)


async def test_the_same_key_with_another_request_is_a_configuration_error() -> None:
    middleware = IdempotencyMiddleware()
    await middleware.handle(ctx(request="r1"), CONFIG, ScriptedNext(ANSWER))
    with pytest.raises(ConfigurationError, match="idempotency_key 'k' was already used for a different request"):
        await middleware.handle(ctx(request="r2"), CONFIG, ScriptedNext())


async def test_a_key_belongs_to_its_tenant() -> None:
    middleware, upstream = IdempotencyMiddleware(), ScriptedNext(ANSWER)
    await middleware.handle(ctx(tenant="a"), CONFIG, upstream)
    other = await middleware.handle(ctx(tenant="b"), CONFIG, upstream)
    assert len(upstream.calls) == 2 and not other.cached


async def test_a_failure_is_not_remembered() -> None:
    middleware = IdempotencyMiddleware()
    with pytest.raises(ProviderUnavailableError):
        await middleware.handle(ctx(), CONFIG, ScriptedNext(ProviderUnavailableError("down", status=503)))
    again = await middleware.handle(ctx(), CONFIG, ScriptedNext(ANSWER))
    assert again.text == "42" and not again.cached


async def test_a_key_is_forgotten_after_the_window() -> None:
    clock = FakeClock()
    middleware = IdempotencyMiddleware(IdempotencyOptions(window_s=60), store=MemoryCacheStore(timer=clock))
    upstream = ScriptedNext(ANSWER, ANSWER)
    await middleware.handle(ctx(), CONFIG, upstream)
    clock.advance(61)
    assert not (await middleware.handle(ctx(), CONFIG, upstream)).cached
    assert len(upstream.calls) == 2


async def test_a_call_without_a_key_passes_through_untouched() -> None:
    store = MemoryCacheStore()
    middleware, upstream = IdempotencyMiddleware(store=store), ScriptedNext(ANSWER, ANSWER)
    for _ in range(2):
        assert not (await middleware.handle(ctx(key=None), CONFIG, upstream)).cached
    assert store.entries == 0


async def test_a_concurrent_repeat_waits_for_the_first_and_shares_its_error() -> None:
    middleware, gate, calls = IdempotencyMiddleware(), asyncio.Event(), []

    async def failing(config: ProviderConfig) -> CompletionResponse:
        calls.append(config)
        await gate.wait()
        raise ProviderUnavailableError("down", status=503)

    tasks = [asyncio.create_task(middleware.handle(ctx(), CONFIG, failing)) for _ in range(5)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert len(calls) == 1 and all(isinstance(r, ProviderUnavailableError) for r in results)


async def test_a_caller_that_stops_waiting_leaves_the_first_call_running_for_its_repeat() -> None:
    middleware, gate, calls = IdempotencyMiddleware(), asyncio.Event(), []

    async def slow(config: ProviderConfig) -> CompletionResponse:
        calls.append(config)
        await gate.wait()
        return ANSWER

    first = asyncio.create_task(middleware.handle(ctx(), CONFIG, slow))
    await asyncio.sleep(0)
    first.cancel()
    repeat = asyncio.create_task(middleware.handle(ctx(), CONFIG, slow))
    await asyncio.sleep(0)
    gate.set()
    assert (await repeat).cached and len(calls) == 1


def _settings(fake: FakeProvider, **middleware: Any) -> Settings:
    price = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 100.0}
    budget = {"limits": [{"scope": "global", "period": "total", "max_cost_usd": 10.0}], "store": "memory"}
    return Settings(configurations={"oa": openai_config(fake, price=price, options={"max_tokens": 50})},
                    middleware={**BUILTIN_MIDDLEWARE_OFF, "idempotency": {}, "budget": budget,
                                "usage": {"store": "memory"}, **middleware})


async def test_fifty_concurrent_calls_with_one_key_make_one_request_and_one_charge(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.script(Fault(delay_s=0.05))
    async with ServiceManager(_settings(fake), host=builtin_only) as manager:
        answers = await asyncio.gather(*(manager.chat("hi", idempotency_key="order-7") for _ in range(50)))
        [bucket] = await manager.state.budget_store().states(now=0)
        journal = manager.state.usage_journal()
        await journal.flush()
        rows = await journal.store.records()
    assert fake.count() == 1 and bucket.spent.requests == 1 and len(rows) == 1
    assert sum(not a.cached for a in answers) == 1 and len({a.text for a in answers}) == 1


async def test_a_repeat_after_the_callers_own_timeout_is_not_charged_again(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.script(Fault(delay_s=0.2))
    async with ServiceManager(_settings(fake), host=builtin_only) as manager:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(manager.chat("hi", idempotency_key="order-8"), 0.05)
        again = await manager.chat("hi", idempotency_key="order-8")
        [bucket] = await manager.state.budget_store().states(now=0)
    assert again.text and fake.count() == 1 and bucket.spent.requests == 1


def test_the_idempotency_store_is_bounded_by_its_own_options(fake: FakeProvider, builtin_only: PluginHost) -> None:
    settings = _settings(fake, idempotency={"max_entries": 3})
    store = ServiceManager(settings, host=builtin_only).state.idempotency_store()
    assert isinstance(store, GuardedCache) and isinstance(store.store, MemoryCacheStore)
    assert store.store.max_entries == 3
