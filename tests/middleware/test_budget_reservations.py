"""What a call reserves before it goes out, by mode: the true bound in strict mode, the estimate otherwise."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal
from zoneinfo import ZoneInfo

import pytest

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.errors import ConfigurationError
from provmw.middleware.budget import BudgetMiddleware, BudgetOptions
from provmw.responses import CompletionResponse, EmbeddingResponse, Usage
from provmw.stores.budgets import Amounts, MemoryBudgetStore
from provmw.testing import FakeClock, call_context

CONFIG = ProviderConfig(identifier="oa", provider="openai", model="gpt-test")
NOON = dt.datetime(2026, 11, 22, 12, tzinfo=ZoneInfo("UTC")).timestamp()
ROOMY = {"scope": "global", "period": "day", "max_cost_usd": 100.0, "max_tokens": 10**9}
FACTS: dict[str, Any] = {"planned_cost_usd": 0.5, "estimated_cost_usd": 0.01, "estimated_input_tokens": 10,
                         "max_input_tokens": 90, "max_output_tokens": 20}


def layer(mode: Literal["strict", "estimate"] = "strict", **limit: Any) -> BudgetMiddleware:
    return BudgetMiddleware(BudgetOptions(limits=[{**ROOMY, **limit}], timezone="UTC", mode=mode),
                            store=MemoryBudgetStore(), wall_clock=FakeClock(NOON))


async def reserved(middleware: BudgetMiddleware, context: ProviderCallContext) -> Amounts:
    """What the bucket holds for the call while it runs."""
    seen: list[Amounts] = []

    async def inner(config: ProviderConfig) -> CompletionResponse | EmbeddingResponse:
        [bucket] = await middleware.store.states(now=NOON)
        seen.append(bucket.reserved)
        if context.operation is ProviderOperation.EMBEDDING:
            return EmbeddingResponse(provider="openai", model="e", vectors=[[1.0]], usage=Usage(input_tokens=1))
        return CompletionResponse(provider="openai", model="gpt-test", text="ok", usage=Usage(cost_usd=0.0))

    await middleware.handle(context, CONFIG, inner)
    return seen[0]


async def test_strict_mode_reserves_the_bound_of_cost_and_tokens() -> None:
    assert await reserved(layer(), call_context(**FACTS)) == Amounts(500_000, 90 + 20, 1)


async def test_estimate_mode_reserves_the_estimate_of_cost_and_tokens() -> None:
    assert await reserved(layer("estimate"), call_context(**FACTS)) == Amounts(10_000, 10 + 20, 1)


async def test_estimate_mode_without_an_estimate_reserves_the_bound() -> None:
    facts = {**FACTS, "estimated_cost_usd": None}
    assert (await reserved(layer("estimate"), call_context(**facts))).cost_micro_usd == 500_000


async def test_a_call_with_no_output_bound_reserves_its_input_tokens_only_where_allowed() -> None:
    facts = {**FACTS, "max_output_tokens": None}
    assert (await reserved(layer("estimate"), call_context(**facts))).tokens == 10
    assert (await reserved(layer("strict", max_tokens=None), call_context(**facts))).tokens == 90


async def test_strict_token_limits_refuse_a_chat_with_no_output_bound() -> None:
    facts = {**FACTS, "max_output_tokens": None}
    with pytest.raises(ConfigurationError, match="'oa' sets no max_tokens; strict token limits need it"):
        await reserved(layer(), call_context(**facts))


async def test_an_embedding_needs_no_output_bound_under_strict_token_limits() -> None:
    facts = {**FACTS, "max_output_tokens": None}
    assert (await reserved(layer(), call_context(ProviderOperation.EMBEDDING, **facts))).tokens == 90


async def test_strict_cost_limits_refuse_an_unpriced_call_and_say_how_to_price_it() -> None:
    facts = {**FACTS, "planned_cost_usd": None}
    with pytest.raises(ConfigurationError, match=r"add \[configurations.<name>.price\] .*or options.max_tokens"):
        await reserved(layer(), call_context(**facts))


async def test_an_unpriced_call_under_token_limits_only_reserves_no_cost() -> None:
    facts = {**FACTS, "planned_cost_usd": None}
    assert await reserved(layer(max_cost_usd=None), call_context(**facts)) == Amounts(0, 110, 1)


async def settled(middleware: BudgetMiddleware, cost_usd: float, tokens: int) -> Amounts:
    """What the bucket holds as spent once a call answered with ``cost_usd`` and ``tokens``."""
    answer = CompletionResponse(provider="openai", model="gpt-test", text="ok",
                                usage=Usage(input_tokens=tokens, output_tokens=0, cost_usd=cost_usd))
    await middleware.handle(call_context(**FACTS), CONFIG, lambda config: _answered(answer))
    [bucket] = await middleware.store.states(now=NOON)
    return bucket.spent


async def _answered(answer: CompletionResponse) -> CompletionResponse:
    return answer


@pytest.mark.parametrize(("mode", "limit", "spent"), [
    ("strict", {"max_tokens": None}, Amounts(500_000, 1_000, 1)),  # a cost limit: the cost is capped
    ("strict", {"max_cost_usd": None}, Amounts(900_000, 110, 1)),  # a token limit: the tokens are
    ("estimate", {}, Amounts(900_000, 1_000, 1)),  # estimates bound nothing: what was reported
])
async def test_usage_above_a_strict_reservation_is_settled_at_it_in_the_limited_dimensions(
        mode: Literal["strict", "estimate"], limit: dict[str, Any], spent: Amounts) -> None:
    assert await settled(layer(mode, **limit), cost_usd=0.9, tokens=1_000) == spent


async def test_usage_within_the_reservation_is_settled_as_reported() -> None:
    assert await settled(layer(), cost_usd=0.25, tokens=40) == Amounts(250_000, 40, 1)
