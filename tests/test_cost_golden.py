"""The golden cost suite: raw provider usage bodies priced by provmw and by an independent oracle.

Each body travels over real HTTP from the fake provider, is normalised by the adapter and
priced by provmw (the bundled table, or for a name it does not list as such the catalogue
mapped onto provmw's prices, ADR 0050); ``genai-prices``, with its own usage extractors and
its own arithmetic, prices the same body. They must agree to 1e-9 USD.
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import genai_prices
import pytest

from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, LOOPBACK_ALLOWED

# genai-prices keeps dated price changes; price every body on one day, so the suite does not drift.
PRICED_ON = datetime.datetime(2025, 12, 1, tzinfo=datetime.UTC)
TOLERANCE_USD = 1e-9

GOLDEN: list[tuple[str, str, dict[str, Any]]] = [
    ("openai", "gpt-4o-mini", {"prompt_tokens": 1200, "completion_tokens": 300}),
    ("openai", "gpt-4o", {"prompt_tokens": 5000, "completion_tokens": 420,
                          "prompt_tokens_details": {"cached_tokens": 4096}}),
    ("openai", "gpt-4.1", {"prompt_tokens": 20480, "completion_tokens": 1500,
                           "prompt_tokens_details": {"cached_tokens": 19968, "audio_tokens": 0}}),
    ("openai", "gpt-5", {"prompt_tokens": 3100, "completion_tokens": 2600,
                         "prompt_tokens_details": {"cached_tokens": 2048},
                         "completion_tokens_details": {"reasoning_tokens": 2240}}),
    ("openai", "gpt-5-mini", {"prompt_tokens": 800, "completion_tokens": 5000,
                              "completion_tokens_details": {"reasoning_tokens": 4800}}),
    ("openai", "o4-mini", {"prompt_tokens": 64000, "completion_tokens": 9000,
                           "prompt_tokens_details": {"cached_tokens": 63488},
                           "completion_tokens_details": {"reasoning_tokens": 8000}}),
    ("openai", "o3", {"prompt_tokens": 1500, "completion_tokens": 3000,
                      "completion_tokens_details": {"reasoning_tokens": 2700}}),
    # BerriAI/litellm#9812: writes given only as a total are 5-minute writes.
    ("anthropic", "claude-3-7-sonnet-20250219", {"input_tokens": 3, "cache_creation_input_tokens": 12304,
                                                 "cache_read_input_tokens": 0, "output_tokens": 550}),
    ("anthropic", "claude-sonnet-4-20250514", {"input_tokens": 21, "cache_read_input_tokens": 48000,
                                               "cache_creation_input_tokens": 0, "output_tokens": 812}),
    ("anthropic", "claude-haiku-4-5", {"input_tokens": 120, "cache_creation_input_tokens": 9000,
                                       "cache_creation": {"ephemeral_5m_input_tokens": 9000,
                                                          "ephemeral_1h_input_tokens": 0},
                                       "cache_read_input_tokens": 0, "output_tokens": 64}),
    ("anthropic", "claude-opus-4-5", {"input_tokens": 40, "cache_creation_input_tokens": 30000,
                                      "cache_creation": {"ephemeral_5m_input_tokens": 0,
                                                         "ephemeral_1h_input_tokens": 30000},
                                      "cache_read_input_tokens": 0, "output_tokens": 1000}),
    ("anthropic", "claude-sonnet-4-5", {"input_tokens": 7, "cache_creation_input_tokens": 5000,
                                        "cache_creation": {"ephemeral_5m_input_tokens": 2000,
                                                           "ephemeral_1h_input_tokens": 3000},
                                        "cache_read_input_tokens": 60000, "output_tokens": 700}),
    # The long-context tier: past 200k input tokens (cache included) every rate changes ...
    ("anthropic", "claude-sonnet-4-5", {"input_tokens": 1000, "cache_creation_input_tokens": 50000,
                                        "cache_creation": {"ephemeral_5m_input_tokens": 50000,
                                                           "ephemeral_1h_input_tokens": 0},
                                        "cache_read_input_tokens": 150000, "output_tokens": 4000}),
    # ... and at exactly 200k it has not yet.
    ("anthropic", "claude-sonnet-4-5", {"input_tokens": 100000, "cache_creation_input_tokens": 0,
                                        "cache_read_input_tokens": 100000, "output_tokens": 4000}),
    ("anthropic", "claude-3-5-haiku-20241022", {"input_tokens": 900, "cache_creation_input_tokens": 2500,
                                                "cache_read_input_tokens": 7000, "output_tokens": 300}),
    ("anthropic", "claude-opus-4-1-20250805", {"input_tokens": 10, "cache_creation_input_tokens": 4000,
                                               "cache_creation": {"ephemeral_5m_input_tokens": 1000,
                                                                  "ephemeral_1h_input_tokens": 3000},
                                               "cache_read_input_tokens": 12000, "output_tokens": 2000}),
]


def oracle_usd(provider: str, model: str, usage: dict[str, Any]) -> Decimal:
    flavor = "chat" if provider == "openai" else "default"
    extracted = genai_prices.extract_usage({"model": model, "usage": usage}, provider_id=provider,
                                           api_flavor=flavor)
    priced = genai_prices.calc_price(extracted.usage, model, provider_id=provider,
                                     genai_request_timestamp=PRICED_ON)
    return priced.total_price


async def provmw_usd(fake: FakeProvider, host: PluginHost, provider: str, model: str,
                     usage: dict[str, Any]) -> float:
    fake.script(Fault(usage=usage))
    base_url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    settings = Settings(middleware=BUILTIN_MIDDLEWARE_OFF, destinations=LOOPBACK_ALLOWED)
    async with ServiceManager(settings, host=host) as manager:
        response = await manager.chat("hi", provider=provider, model=model, base_url=base_url)
    assert response.usage.cost_usd is not None
    return response.usage.cost_usd


@pytest.mark.parametrize(("provider", "model", "usage"), GOLDEN, ids=[f"{p}-{m}" for p, m, _ in GOLDEN])
async def test_provmw_prices_a_raw_usage_body_as_the_oracle_does(fake: FakeProvider, builtin_only: PluginHost,
                                                                 provider: str, model: str,
                                                                 usage: dict[str, Any]) -> None:
    ours = await provmw_usd(fake, builtin_only, provider, model, usage)
    assert abs(Decimal(repr(ours)) - oracle_usd(provider, model, usage)) <= Decimal(repr(TOLERANCE_USD))


def test_the_suite_covers_every_kind_of_count() -> None:
    kinds = [set(usage) | set(usage.get("cache_creation", {})) | set(usage.get("prompt_tokens_details", {}))
             | set(usage.get("completion_tokens_details", {})) for _, _, usage in GOLDEN]
    every = set().union(*kinds)
    assert {"cached_tokens", "reasoning_tokens", "ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens",
            "cache_read_input_tokens"} <= every
    assert len(GOLDEN) >= 12 and len({m for _, m, _ in GOLDEN}) >= 10
