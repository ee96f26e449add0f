"""The budget layer, pinned where the mutation run found it unchecked (docs/testing.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from provmw.config import ProviderConfig
from provmw.context import AttemptMeter, attempt_meters
from provmw.errors import BudgetExceededError
from provmw.middleware.budget import BudgetMiddleware, BudgetOptions
from provmw.responses import ChatChunk, CompletionResponse, Usage
from provmw.stores.budgets import Amounts, BucketState, MemoryBudgetStore
from provmw.streams import OpenedStream, open_stream
from provmw.testing import FakeClock, ScriptedNext, call_context

CONFIG = ProviderConfig(identifier="oa", provider="openai", model="gpt-test")
GLOBAL = {"scope": "global", "period": "total", "max_cost_usd": 1.0}


def budget(*limits: dict[str, Any], **options: Any) -> BudgetMiddleware:
    return BudgetMiddleware(BudgetOptions(limits=list(limits), **options), store=MemoryBudgetStore(),
                            wall_clock=FakeClock(1_000.0))


async def bucket(middleware: BudgetMiddleware) -> BucketState:
    [state] = await middleware.store.states(now=1_000.0)
    return state


async def served_below(config: ProviderConfig) -> OpenedStream:
    """A layer below the budget that answers with a stream of its own, no provider attempt made."""
    async def chunks() -> AsyncIterator[ChatChunk]:
        yield ChatChunk(text="hi")
        yield ChatChunk(finish_reason="stop", usage=Usage(input_tokens=7, output_tokens=3, cost_usd=0.002))

    return await open_stream(chunks(), provider="openai", model="gpt-test", served_by=config.identifier,
                             first_chunk_s=5.0, idle_s=5.0, price=None, estimated_input_tokens=7,
                             max_output_tokens=20, scrub=lambda exc: None)


async def test_a_stream_answered_below_the_budget_is_settled_at_the_usage_of_its_end() -> None:
    middleware = budget(GLOBAL)
    opened = await middleware.handle(call_context(planned_cost_usd=0.01, estimated_input_tokens=7,
                                                  max_output_tokens=20), CONFIG, served_below)
    assert isinstance(opened, OpenedStream) and (await bucket(middleware)).reserved.cost_micro_usd == 10_000
    [chunk async for chunk in opened.chunks()]
    assert ((await bucket(middleware)).spent, (await bucket(middleware)).reserved) == (Amounts(2_000, 10, 1), Amounts())


def cents(cost_usd: float) -> Usage:
    return Usage(input_tokens=5, output_tokens=5, cost_usd=cost_usd)


def answer(config: ProviderConfig) -> CompletionResponse:
    return CompletionResponse(provider=config.provider, model=config.model, served_by=config.identifier, text="ok")


async def test_a_first_refusal_is_no_further_attempt_and_names_the_strict_worst_case() -> None:
    middleware = budget({"scope": "global", "period": "total", "max_cost_usd": 0.005})
    with pytest.raises(BudgetExceededError) as refused:
        await middleware.handle(call_context(planned_cost_usd=0.01, max_output_tokens=20), CONFIG, ScriptedNext())
    error = refused.value
    assert (error.further_attempt, error.needed, error.set_by) == (False, 0.01, "oa")
    assert error.reason is not None and error.reason.startswith("the most expensive configuration")


async def test_a_refused_further_attempt_says_it_is_one_and_what_it_needed() -> None:
    middleware = budget({"scope": "global", "period": "total", "max_cost_usd": 0.015})

    async def retried(config: ProviderConfig) -> CompletionResponse:
        [meter] = attempt_meters()
        await meter.sending(config)
        await meter.ended(config, "unknown", None)  # the first attempt's usage is unknown: its reservation
        await meter.sending(config)  # a retry: another 0.01 does not fit in 0.015
        return answer(config)

    with pytest.raises(BudgetExceededError) as refused:
        await middleware.handle(call_context(planned_cost_usd=0.01, max_output_tokens=20), CONFIG, retried)
    assert (refused.value.further_attempt, refused.value.needed) == (True, 0.01)
    assert (await bucket(middleware)).spent.cost_micro_usd == 10_000


async def test_an_attempt_still_open_when_the_call_returns_is_settled_once_it_ends() -> None:
    middleware = budget(GLOBAL)
    meters: list[AttemptMeter] = []

    async def hedged(config: ProviderConfig) -> CompletionResponse:
        [meter] = meters[:] = attempt_meters()
        await meter.sending(config)
        await meter.sending(config)  # a second attempt at once, still open when the first answers
        await meter.ended(config, "yes", cents(0.002))
        return answer(config)

    await middleware.handle(call_context(planned_cost_usd=0.01, max_output_tokens=20), CONFIG, hedged)
    await meters[0].ended(CONFIG, "yes", cents(0.003))
    assert (await bucket(middleware)).spent == Amounts(5_000, 20, 1)


async def test_after_a_refused_attempt_each_further_attempt_still_reserves_its_own() -> None:
    middleware = budget({"scope": "global", "period": "total", "max_cost_usd": 0.025})
    outcomes: list[str] = []

    async def carries_on(config: ProviderConfig) -> CompletionResponse:
        [meter] = attempt_meters()
        for _ in range(4):  # a layer that tries again after a refusal (two attempts fit in 0.025)
            try:
                await meter.sending(config)
            except BudgetExceededError:
                outcomes.append("refused")
            else:
                outcomes.append("sent")
                await meter.ended(config, "unknown", None)
        return answer(config)

    await middleware.handle(call_context(planned_cost_usd=0.01, max_output_tokens=20), CONFIG, carries_on)
    assert outcomes == ["sent", "sent", "refused", "refused"]
