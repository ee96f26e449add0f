"""A call's worst case is its own: requests with options of their own, other price tables and embeddings on one
configuration never get a worst case worked out for another."""

from __future__ import annotations

from typing import Any

import pytest

from provmw.config import ProviderConfig
from provmw.context import CallFacts, ProviderOperation
from provmw.facts import call_facts
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
    for request, output in [(chat(max_tokens=10), 10), (chat(max_tokens=1_000), 1_000), (chat(), 100)]:
        worked_out = facts(request, prices)  # one after the other, on one configuration and table
        assert worked_out.planned_cost_usd == pytest.approx((worked_out.max_input_tokens + output * 100.0) / 1e6)


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
