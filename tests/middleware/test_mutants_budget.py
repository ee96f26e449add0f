"""The budget layer, pinned where the mutation run found it unchecked (docs/testing.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from provmw.config import ProviderConfig
from provmw.middleware.budget import BudgetMiddleware, BudgetOptions
from provmw.responses import ChatChunk, Usage
from provmw.stores.budgets import Amounts, BucketState, MemoryBudgetStore
from provmw.streams import OpenedStream, open_stream
from provmw.testing import FakeClock, call_context

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
