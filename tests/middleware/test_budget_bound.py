"""The strict worst case is a true bound: no reported usage within it settles above the reservation (ADR 0015)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provmw._call.facts import cache_write_ttl, call_facts, input_token_bound
from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.errors import BudgetExceededError
from provmw.manager import ServiceManager
from provmw.messages import ImagePart, Message, TextPart, ToolSpec
from provmw.middleware.budget import BudgetMiddleware, BudgetOptions
from provmw.plugins import PluginHost
from provmw.pricing import PriceTable
from provmw.requests import ChatRequest
from provmw.responses import CompletionResponse, Usage
from provmw.settings import Settings
from provmw.stores.budgets import Amounts, Charge, MemoryBudgetStore, Refusal
from provmw.testing import FakeProvider, Fault, ScriptedNext
from tests.conftest import anthropic_config, openai_config

CJK = "漢字仮名交じり文" * 5000  # 40,000 characters; a real tokenizer counts about one token each
LIMIT = {"scope": "global", "period": "total", "max_cost_usd": 0.10}
SONNET = {"input_usd_per_mtok": 3.0, "output_usd_per_mtok": 15.0, "cache_write_5m_usd_per_mtok": 3.75,
          "cache_write_1h_usd_per_mtok": 6.0, "cached_input_usd_per_mtok": 0.3}


@pytest.fixture
async def dense() -> AsyncIterator[FakeProvider]:
    async with FakeProvider(tokenizer="characters") as server:
        yield server


def settings_for(config: ProviderConfig) -> Settings:
    return Settings(configurations={config.identifier: config},
                    middleware={"budget": {"store": "memory", "limits": [LIMIT]}, "usage": {"store": "memory"}})


async def spent_in_race(manager: ServiceManager, prompt: str, calls: int) -> tuple[float, int]:
    outcomes = await asyncio.gather(*(manager.chat(prompt) for _ in range(calls)), return_exceptions=True)
    served = [o for o in outcomes if isinstance(o, CompletionResponse)]
    assert all(isinstance(o, CompletionResponse | BudgetExceededError) for o in outcomes)
    return sum(o.usage.cost_usd or 0.0 for o in served), len(served)


async def test_forty_thousand_cjk_characters_never_overspend_a_strict_limit(
        dense: FakeProvider, builtin_only: PluginHost) -> None:
    config = openai_config(dense, price={"input_usd_per_mtok": 0.25, "output_usd_per_mtok": 1.0},
                           options={"max_tokens": 50})
    async with ServiceManager(settings_for(config), host=builtin_only) as manager:
        spent, served = await spent_in_race(manager, CJK, 20)
    assert served >= 1
    assert spent <= 0.10


async def test_a_prompt_cached_request_reserves_at_the_cache_write_rate(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    prompt = "cache me " * 1000  # 2,000 tokens of the fake's tokenizer, all written to the 1-hour cache
    fake.script(*[Fault(usage={"input_tokens": 4, "cache_creation_input_tokens": 2000, "output_tokens": 20,
                               "cache_creation": {"ephemeral_1h_input_tokens": 2000}})] * 10)
    cached = {"max_tokens": 20, "extra_body": {"cache_control": {"type": "ephemeral", "ttl": "1h"}}}
    config = anthropic_config(fake, price=SONNET, options=cached)
    async with ServiceManager(settings_for(config), host=builtin_only) as manager:
        spent, served = await spent_in_race(manager, prompt, 10)
    assert served >= 1
    assert spent <= 0.10


def test_estimates_stay_cheap_while_the_bound_counts_bytes() -> None:
    config = ProviderConfig(identifier="c", provider="openai", model="gpt-4o-mini")
    facts = call_facts(ProviderOperation.CHAT, config, ChatRequest([Message.user(CJK)]), chain=(config,),
                       prices=PriceTable(), known_controls=())
    assert facts.estimated_input_tokens == 10_001
    assert facts.max_input_tokens >= 3 * len(CJK)


PRICES = st.one_of(st.none(), st.fixed_dictionaries({
    "input_usd_per_mtok": st.sampled_from([0.15, 1.0, 3.0]), "output_usd_per_mtok": st.sampled_from([0.6, 15.0]),
}, optional={
    "max_output_tokens": st.sampled_from([1_000, 8_192]),
    "tiers": st.just([{"above_input_tokens": 200, "input_usd_per_mtok": 6.0, "output_usd_per_mtok": 22.5}]),
}))
OPTIONS = st.fixed_dictionaries({}, optional={
    "max_tokens": st.integers(1, 4_096), "temperature": st.just(0),
    "extra_body": st.sampled_from([{"cache_control": {"type": "ephemeral"}},
                                   {"cache_control": {"type": "ephemeral", "ttl": "1h"}}]),
})


def reference_bounds(chain: Sequence[ProviderConfig], request: ChatRequest,
                     prices: PriceTable) -> tuple[int, float | None, float | None]:
    """The bound and both worst cases, computed straight from each configuration's merged options and price."""
    tokens, worst = [], []
    for config in chain:
        options = {**config.options, **request.options}
        bound = input_token_bound(config.provider, request, options)
        tokens.append(bound)
        price = prices.price_for(config)
        outputs = [v for k in ("max_tokens", "max_completion_tokens") if isinstance(v := options.get(k), int)]
        worst.append(None if price is None else price.worst_case_usd(
            bound, max(outputs) if outputs else None, cache_write_ttl=cache_write_ttl(options)))
    facts = call_facts(ProviderOperation.CHAT, chain[0], request, chain=chain, prices=prices, known_controls=())
    at_estimate = [None if (price := prices.price_for(config)) is None
                   else price.worst_case_usd(facts.estimated_input_tokens, facts.max_output_tokens) for config in chain]
    return (max(tokens), None if None in worst else max(w for w in worst if w is not None),
            None if None in at_estimate else max(w for w in at_estimate if w is not None))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["openai", "anthropic", "other"]), PRICES, OPTIONS), min_size=1,
                max_size=3),
       OPTIONS, st.text(max_size=60), st.integers(1, 3))
def test_the_bounds_worked_out_once_per_configuration_equal_the_prices_own(
        configs: list[tuple[str, Any, dict[str, Any]]], asked: dict[str, Any], text: str, repeat: int) -> None:
    chain = tuple(ProviderConfig(identifier=f"c{i}", provider=provider, model="m", price=price, options=options)
                  for i, (provider, price, options) in enumerate(configs))
    request, prices = ChatRequest([Message.user(text or "hi")], options=asked), PriceTable()
    for _ in range(repeat):  # the second time from what the first worked out
        facts = call_facts(ProviderOperation.CHAT, chain[0], request, chain=chain, prices=prices, known_controls=())
        expected = reference_bounds(chain, request, prices)
        assert (facts.max_input_tokens, facts.planned_cost_usd, facts.estimated_cost_usd) == pytest.approx(expected)


class Recording(MemoryBudgetStore):
    """The memory store, keeping what each call reserved and settled."""

    def __init__(self) -> None:
        super().__init__()
        self.reserved: list[Amounts] = []
        self.settled: list[Amounts] = []

    async def reserve(self, reservation_id: str, charges: Sequence[Charge], *, now: float,
                      lease_s: float) -> Refusal | None:
        self.reserved.extend(charge.amount for charge in charges)
        return await super().reserve(reservation_id, charges, now=now, lease_s=lease_s)

    async def settle(self, reservation_id: str, actual: Amounts) -> None:
        self.settled.append(actual)
        await super().settle(reservation_id, actual)


TIERED = {**SONNET, "tiers": [{"above_input_tokens": 300, "input_usd_per_mtok": 6.0, "output_usd_per_mtok": 22.5,
                               "cache_write_1h_usd_per_mtok": 12.0}]}
TOOL = ToolSpec(name="lookup", description="Looks a word up",
                parameters={"type": "object", "properties": {"word": {"type": "string"}}})


@st.composite
def requests(draw: st.DrawFn) -> tuple[ChatRequest, str | None]:
    texts = draw(st.lists(st.text(max_size=60), min_size=1, max_size=4))
    images = draw(st.integers(0, 2))
    parts: list[TextPart | ImagePart] = [TextPart(texts[-1]), *[ImagePart(url="https://x.test/i.png")] * images]
    ttl = draw(st.sampled_from([None, "5m", "1h"]))
    options: dict[str, Any] = {"max_tokens": draw(st.integers(1, 400))}
    if ttl is not None:
        options["extra_body"] = {"cache_control": {"type": "ephemeral", "ttl": ttl}}
    messages = [Message.user(t) for t in texts[:-1]] + [Message.user(parts)]
    return ChatRequest(messages, tools=[TOOL] if draw(st.booleans()) else [], options=options), ttl


@st.composite
def usages(draw: st.DrawFn, max_input: int, max_output: int, ttl: str | None) -> Usage:
    """Any usage a provider could report within the bound: input parts that fit, writes only if asked for."""
    input_tokens = draw(st.integers(0, max_input))
    reads = draw(st.integers(0, input_tokens))
    five = draw(st.integers(0, input_tokens - reads)) if ttl is not None else 0
    hour = draw(st.integers(0, input_tokens - reads - five)) if ttl == "1h" else 0
    output = draw(st.integers(0, max_output))
    return Usage(input_tokens=input_tokens, output_tokens=output, cached_input_tokens=reads,
                 cache_write_5m_tokens=five, cache_write_1h_tokens=hour,
                 reasoning_tokens=draw(st.integers(0, output)))


async def reserved_and_settled(provider: str, request: ChatRequest,
                               usage_within: Any) -> tuple[Amounts, Amounts]:
    """The reservation a strict budget makes for ``request`` and what it settles for the usage
    ``usage_within(max_input_tokens)`` reports."""
    config = ProviderConfig(identifier="c", provider=provider, model="m", price=TIERED)
    facts = call_facts(ProviderOperation.CHAT, config, request, chain=(config,), prices=PriceTable(),
                       known_controls=())
    usage = usage_within(facts.max_input_tokens)
    assert config.price is not None
    answer = CompletionResponse(provider=provider, model="m", usage=Usage(
        **{**usage.to_dict(), "cost_usd": config.price.cost_usd(usage)}))
    store = Recording()
    budget = BudgetMiddleware(BudgetOptions(limits=[{"scope": "global", "max_cost_usd": 1e6, "max_tokens": 10**12}]),
                              store=store)
    await budget.handle(ProviderCallContext(ProviderOperation.CHAT, facts=facts), config, ScriptedNext(answer))
    [reserved], [settled] = store.reserved, store.settled
    return reserved, settled


@settings(max_examples=300, deadline=None)
@given(provider=st.sampled_from(["openai", "anthropic", "third-party"]), drawn=requests(), data=st.data())
async def test_settle_never_exceeds_the_reservation(provider: str, drawn: tuple[ChatRequest, str | None],
                                                    data: st.DataObject) -> None:
    request, ttl = drawn
    reserved, settled = await reserved_and_settled(
        provider, request, lambda bound: data.draw(usages(bound, request.options["max_tokens"], ttl)))
    assert settled.cost_micro_usd <= reserved.cost_micro_usd
    assert settled.tokens <= reserved.tokens


async def test_a_whole_bound_of_one_hour_cache_writes_settles_within_the_reservation() -> None:
    request = ChatRequest([Message.user("x" * 2000)], options={
        "max_tokens": 1, "extra_body": {"cache_control": {"type": "ephemeral", "ttl": "1h"}}})
    reserved, settled = await reserved_and_settled("anthropic", request, lambda bound: Usage(
        input_tokens=bound, cache_write_1h_tokens=bound, output_tokens=1))
    assert settled.cost_micro_usd <= reserved.cost_micro_usd


def test_the_output_bound_is_the_largest_max_tokens_in_the_fallback_chain() -> None:
    primary = ProviderConfig(identifier="p", provider="openai", model="m", options={"max_tokens": 10}, fallbacks=("b",))
    backup = ProviderConfig(identifier="b", provider="openai", model="m", options={"max_tokens": 4000})
    facts = call_facts(ProviderOperation.CHAT, primary, ChatRequest([Message.user("hi")]), chain=[primary, backup],
                       prices=PriceTable({}), known_controls=())
    assert facts.max_output_tokens == 4000


def test_a_fallback_without_max_tokens_leaves_the_output_unbounded() -> None:
    primary = ProviderConfig(identifier="p", provider="openai", model="m", options={"max_tokens": 10}, fallbacks=("b",))
    backup = ProviderConfig(identifier="b", provider="openai", model="m")
    facts = call_facts(ProviderOperation.CHAT, primary, ChatRequest([Message.user("hi")]), chain=[primary, backup],
                       prices=PriceTable({}), known_controls=())
    assert facts.max_output_tokens is None
