"""A call's worst case is its own: requests with options of their own, other price tables and embeddings on one
configuration never get a worst case worked out for another."""

from __future__ import annotations

from typing import Any

import pytest

from provmw._call.facts import call_facts, input_token_bound
from provmw.config import ProviderConfig
from provmw.context import CallFacts, ProviderOperation
from provmw.messages import Message
from provmw.pricing import Price, PriceTable
from provmw.requests import ChatRequest, EmbeddingRequest, ProviderRequest

PRICE = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 100.0}
CONFIG = ProviderConfig(identifier="c", provider="openai", model="m", price=PRICE, options={"max_tokens": 100})


def facts(request: ProviderRequest, prices: PriceTable | None = None, config: ProviderConfig = CONFIG) -> CallFacts:
    operation = ProviderOperation.EMBEDDING if isinstance(request, EmbeddingRequest) else ProviderOperation.CHAT
    return call_facts(operation, config, request, chain=(config,), prices=prices or PriceTable(), known_controls=())


def chat(**options: Any) -> ChatRequest:
    return ChatRequest((Message.user("the same words"),), options=options)


def test_each_request_with_options_of_its_own_gets_its_own_worst_case() -> None:
    prices = PriceTable()
    for request, output in [(chat(), 100), (chat(max_tokens=10), 10), (chat(max_tokens=1_000), 1_000), (chat(), 100)]:
        worked_out = facts(request, prices)  # one after the other, on one configuration and table
        assert worked_out.planned_cost_usd == (worked_out.max_input_tokens * 1.0 + output * 100.0) / 1e6


def test_the_bound_is_the_configurations_providers() -> None:
    assert facts(chat()).max_input_tokens == input_token_bound("openai", chat(), {"max_tokens": 100})


def test_a_tiered_price_past_its_tier_is_priced_at_the_tier() -> None:
    tiered = ProviderConfig(identifier="t", provider="openai", model="m", options={"max_tokens": 10}, price={
        **PRICE, "tiers": [{"above_input_tokens": 100, "input_usd_per_mtok": 2.0, "output_usd_per_mtok": 200.0}]})
    long = facts(ChatRequest((Message.user("x" * 500),)), config=tiered)
    assert long.planned_cost_usd == pytest.approx((long.max_input_tokens * 2.0 + 10 * 200.0) / 1e6)


def test_another_price_table_prices_the_same_configuration_anew() -> None:
    config = ProviderConfig(identifier="u", provider="openai", model="unlisted-model", options={"max_tokens": 100})
    listed = PriceTable({("openai", "unlisted-model"): Price(input_usd_per_mtok=1.0, output_usd_per_mtok=100.0)})
    assert facts(chat(), PriceTable(), config).planned_cost_usd is None
    priced = facts(chat(), listed, config)
    assert priced.planned_cost_usd == pytest.approx((priced.max_input_tokens * 1.0 + 100 * 100.0) / 1e6)


def test_an_embedding_has_no_output_to_pay_for() -> None:
    facts(chat())  # the configuration's chat worst case, worked out first
    embedding = facts(EmbeddingRequest(("the same words",)))
    assert embedding.planned_cost_usd == pytest.approx(embedding.max_input_tokens * 1.0 / 1e6)
