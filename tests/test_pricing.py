"""Pricing: the bundled table, overrides, costs and worst cases."""

from __future__ import annotations

import datetime
import logging
import re
from pathlib import Path

import pytest

from provmw import pricing
from provmw._call.facts import call_facts
from provmw.config import ProviderConfig
from provmw.context import ProviderOperation
from provmw.errors import ConfigurationError
from provmw.manager import ServiceManager
from provmw.messages import Message
from provmw.plugins import PluginHost
from provmw.pricing import Price, PriceTable
from provmw.requests import ChatRequest
from provmw.responses import Usage
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, LOOPBACK_ALLOWED, openai_config


def config(model: str, **fields: object) -> ProviderConfig:
    return ProviderConfig(identifier="c", provider="openai", model=model, **fields)  # type: ignore[arg-type]


def test_the_bundled_table_says_when_it_was_taken() -> None:
    written = re.search(r"^taken = (\S+)$", (Path(pricing.__file__).parent / "prices.toml").read_text(), re.M)
    assert written is not None
    taken = PriceTable().taken
    assert taken == datetime.date.fromisoformat(written[1])
    assert taken is not None and datetime.date(2025, 1, 1) <= taken <= datetime.date.today()  # real, never ahead


def test_a_table_built_in_code_keeps_the_date_it_is_given() -> None:
    assert PriceTable({}, taken=datetime.date(2026, 1, 2)).taken == datetime.date(2026, 1, 2)


def test_a_dated_snapshot_is_priced_by_its_longest_known_prefix() -> None:
    table = PriceTable()
    assert table.price_for(config("gpt-4o-mini-2024-07-18")) == table.price_for(config("gpt-4o-mini"))
    assert table.price_for(config("gpt-4o-2024-08-06")) == table.price_for(config("gpt-4o"))
    assert table.price_for(config("gpt-4o-mini")) != table.price_for(config("gpt-4o"))


def test_common_anthropic_and_embedding_models_are_priced() -> None:
    table = PriceTable()
    sonnet = ProviderConfig(identifier="a", provider="anthropic", model="claude-sonnet-4-20250514")
    assert table.price_for(sonnet) is not None
    assert table.price_for(config("text-embedding-3-small")) is not None


def test_an_unknown_model_has_no_price_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    table = PriceTable()
    with caplog.at_level(logging.WARNING, logger="provmw.pricing"):
        assert table.price_for(config("mystery-model")) is None
        assert table.price_for(config("mystery-model")) is None
    assert [r.getMessage().count("mystery-model") for r in caplog.records] == [1]


def test_a_configuration_price_overrides_the_table() -> None:
    own = config("gpt-4o", price={"input_usd_per_mtok": 9.0, "output_usd_per_mtok": 9.0})
    assert PriceTable().price_for(own) == Price(input_usd_per_mtok=9.0, output_usd_per_mtok=9.0)


def test_a_misspelt_price_key_names_a_near_match() -> None:
    with pytest.raises(ConfigurationError, match="did you mean 'output_usd_per_mtok'"):
        config("m", price={"input_usd_per_mtok": 1.0, "outpt_usd_per_mtok": 1.0})


def test_a_negative_price_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="input_usd_per_mtok must be a number >= 0"):
        config("m", price={"input_usd_per_mtok": -1.0})


def test_cached_input_tokens_are_charged_at_the_cached_rate() -> None:
    price = Price(input_usd_per_mtok=2.0, cached_input_usd_per_mtok=0.5, output_usd_per_mtok=8.0)
    usage = Usage(input_tokens=1_000_000, cached_input_tokens=400_000, output_tokens=100_000)
    assert price.cost_usd(usage) == pytest.approx(0.6 * 2.0 + 0.4 * 0.5 + 0.1 * 8.0)


def test_the_worst_case_uses_max_tokens_else_the_model_ceiling() -> None:
    price = Price(input_usd_per_mtok=1.0, output_usd_per_mtok=10.0, max_output_tokens=1000)
    assert price.worst_case_usd(100, 50) == pytest.approx((100 * 1.0 + 50 * 10.0) / 1e6)
    assert price.worst_case_usd(100, None) == pytest.approx((100 * 1.0 + 1000 * 10.0) / 1e6)
    assert Price(input_usd_per_mtok=1.0).worst_case_usd(100, None) is None


def estimated_cost(chain: list[ProviderConfig]) -> float | None:
    """A call of 100 estimated input tokens (396 characters) and at most 100 out, over ``chain``."""
    request = ChatRequest([Message.user("x" * 396)], options={"max_tokens": 100})
    return call_facts(ProviderOperation.CHAT, chain[0], request, chain=chain, prices=PriceTable(),
                      known_controls=()).estimated_cost_usd


def test_the_planned_cost_is_the_most_expensive_configuration_in_the_chain() -> None:
    cheap = config("a", price={"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 1.0})
    dear = config("b", price={"input_usd_per_mtok": 5.0, "output_usd_per_mtok": 5.0})
    assert estimated_cost([cheap, dear]) == pytest.approx((100 + 100) * 5.0 / 1e6)


def test_one_unpriced_configuration_leaves_the_plan_unknown() -> None:
    cheap = config("a", price={"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 1.0})
    assert estimated_cost([cheap, config("unknown-model")]) is None


async def test_a_response_carries_its_cost_over_real_http(fake: FakeProvider, builtin_only: PluginHost) -> None:
    priced = openai_config(fake, price={"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0})
    settings = Settings(configurations={"oa": priced}, middleware=BUILTIN_MIDDLEWARE_OFF)
    async with ServiceManager(settings, host=builtin_only) as manager:
        response = await manager.chat("one two three")
    usage = response.usage
    assert usage.input_tokens > 0
    assert usage.cost_usd == pytest.approx((usage.input_tokens * 1.0 + usage.output_tokens * 2.0) / 1e6)


SONNET = Price(input_usd_per_mtok=3.0, cached_input_usd_per_mtok=0.3, output_usd_per_mtok=15.0,
               cache_write_5m_usd_per_mtok=3.75, cache_write_1h_usd_per_mtok=6.0,
               tiers=[{"above_input_tokens": 200_000, "input_usd_per_mtok": 6.0, "output_usd_per_mtok": 22.5,
                       "cached_input_usd_per_mtok": 0.6, "cache_write_5m_usd_per_mtok": 7.5,
                       "cache_write_1h_usd_per_mtok": 12.0}])


async def test_litellm_9812_is_priced_as_anthropic_billed_it(fake: FakeProvider, builtin_only: PluginHost) -> None:
    # The usage body quoted in BerriAI/litellm#9812 (Claude 3.7 Sonnet): Anthropic billed $0.054399.
    fake.script(Fault(usage={"input_tokens": 3, "cache_creation_input_tokens": 12304,
                             "cache_read_input_tokens": 0, "output_tokens": 550}))
    settings = Settings(middleware=BUILTIN_MIDDLEWARE_OFF, destinations=LOOPBACK_ALLOWED)
    async with ServiceManager(settings, host=builtin_only) as manager:
        response = await manager.chat("hi", provider="anthropic", model="claude-3-7-sonnet-20250219",
                                      base_url=fake.anthropic_base_url)
    assert response.usage.cost_usd == pytest.approx(0.054399, abs=1e-12)


def test_cache_writes_are_charged_at_their_ttl_rate() -> None:
    usage = Usage(input_tokens=100_000, cache_write_5m_tokens=30_000, cache_write_1h_tokens=20_000)
    assert SONNET.cost_usd(usage) == pytest.approx((50_000 * 3.0 + 30_000 * 3.75 + 20_000 * 6.0) / 1e6)


def test_unset_rates_default_to_the_input_rate_and_anthropics_write_multiples() -> None:
    price = Price(input_usd_per_mtok=2.0)
    usage = Usage(input_tokens=3_000_000, cached_input_tokens=1_000_000, cache_write_5m_tokens=1_000_000,
                  cache_write_1h_tokens=1_000_000)
    assert price.cost_usd(usage) == pytest.approx(2.0 + 2.0 * 1.25 + 2.0 * 2.0)


def test_reasoning_tokens_are_output_tokens_not_an_extra_charge() -> None:
    usage = Usage(input_tokens=0, output_tokens=1_000_000, reasoning_tokens=900_000)
    assert SONNET.cost_usd(usage) == pytest.approx(15.0)


def test_a_tier_prices_every_token_once_the_input_exceeds_its_threshold() -> None:
    at = Usage(input_tokens=200_000, cached_input_tokens=100_000, output_tokens=1000)
    above = Usage(input_tokens=200_001, cached_input_tokens=100_000, output_tokens=1000)
    assert SONNET.cost_usd(at) == pytest.approx((100_000 * 3.0 + 100_000 * 0.3 + 1000 * 15.0) / 1e6)
    assert SONNET.cost_usd(above) == pytest.approx((100_001 * 6.0 + 100_000 * 0.6 + 1000 * 22.5) / 1e6)


def test_tiers_must_rise() -> None:
    tier = {"above_input_tokens": 1000, "input_usd_per_mtok": 1.0}
    with pytest.raises(ConfigurationError, match=r"tiers must rise .* got \[1000, 1000\]"):
        Price(input_usd_per_mtok=1.0, tiers=[tier, tier])


def test_a_misspelt_tier_key_names_the_tier_and_a_near_match() -> None:
    with pytest.raises(ConfigurationError, match=r"tiers\[0\]: unknown key 'input_usd' \(did you mean"):
        config("m", price={"input_usd_per_mtok": 1.0, "tiers": [{"above_input_tokens": 1, "input_usd": 2.0}]})


def test_the_worst_case_prices_input_at_the_write_rate_when_the_call_asks_for_caching() -> None:
    assert SONNET.worst_case_usd(1000, 0) == pytest.approx(1000 * 3.0 / 1e6)
    assert SONNET.worst_case_usd(1000, 0, cache_write_ttl="5m") == pytest.approx(1000 * 3.75 / 1e6)
    assert SONNET.worst_case_usd(1000, 0, cache_write_ttl="1h") == pytest.approx(1000 * 6.0 / 1e6)


def test_the_worst_case_uses_the_tier_a_bound_above_its_threshold_may_reach() -> None:
    assert SONNET.worst_case_usd(200_001, 10) == pytest.approx((200_001 * 6.0 + 10 * 22.5) / 1e6)
    assert SONNET.worst_case_usd(200_000, 10) == pytest.approx((200_000 * 3.0 + 10 * 15.0) / 1e6)


def test_the_bundled_sonnet_4_5_has_write_rates_and_a_long_context_tier() -> None:
    price = PriceTable().price_for(ProviderConfig(identifier="a", provider="anthropic", model="claude-sonnet-4-5"))
    assert price is not None and price.cache_write_1h_usd_per_mtok == 6.0
    assert [t.above_input_tokens for t in price.tiers] == [200_000]


def test_a_unit_chosen_by_the_provider_is_bounded_by_the_dearest_it_may_be() -> None:
    price = Price(input_usd_per_mtok=0, units={"image:1024x1024:low": 0.01, "image:1024x1024:high": 0.17,
                                               "image:1536x1024:high": 0.25})
    assert price.most_units_usd({"image:1024x1024:auto": 2}) == 0.34
    assert price.most_units_usd({"image:auto:high": 1}) == 0.25
    assert price.most_units_usd({"image:512x512:auto": 1}) is None
    assert price.most_units_usd({"audio_second": 1}) is None
