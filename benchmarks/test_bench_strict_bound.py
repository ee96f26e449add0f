"""What the strict budget's true bound costs per call (ADR 0015).

``call_facts`` computes both sizes of a call's input (the 4-characters estimate and the
byte bound with its allowances) and prices the worst case over the fallback chain. Each
case is measured against the estimate alone (what 0.1.0 priced), on three requests: a
short chat, 40,000 CJK characters, and a prompt-cached chat with a tool on a two-model chain.
"""

from __future__ import annotations

from typing import Any

import pytest

from provmw._call.facts import call_facts, estimate_tokens
from provmw.config import ProviderConfig
from provmw.context import ProviderOperation
from provmw.messages import Message, ToolSpec
from provmw.pricing import PriceTable
from provmw.requests import ChatRequest

PRIMARY = ProviderConfig(identifier="p", provider="anthropic", model="claude-sonnet-4-5",
                         options={"max_tokens": 1024}, fallbacks=("f",))
FALLBACK = ProviderConfig(identifier="f", provider="openai", model="gpt-4o-mini", options={"max_tokens": 1024})
TOOL = ToolSpec(name="lookup", description="Looks a word up",
                parameters={"type": "object", "properties": {"word": {"type": "string"}}})
REQUESTS = {
    "short chat": ChatRequest([Message.system("Be brief."), Message.user("What is the capital of France?")]),
    "40k CJK characters": ChatRequest([Message.user("漢字仮名交じり文" * 5000)]),
    "cached, tool, 2-model chain": ChatRequest(
        [Message.system("You are a dictionary. " * 200), Message.user("define 'bound'")], tools=[TOOL],
        options={"extra_body": {"cache_control": {"type": "ephemeral", "ttl": "1h"}}}),
}


@pytest.mark.parametrize("case", list(REQUESTS))
def test_strict_bound_per_call(benchmark: Any, case: str) -> None:
    request, prices = REQUESTS[case], PriceTable()
    chain = (PRIMARY, FALLBACK)
    benchmark.group = f"strict reservation facts: {case}"
    # The bounds are computed on first read (ADR 0029): read them, as a budget does.
    planned = benchmark(lambda: call_facts(ProviderOperation.CHAT, PRIMARY, request, chain=chain, prices=prices,
                                           known_controls=()).planned_cost_usd)
    assert planned is not None


@pytest.mark.parametrize("case", list(REQUESTS))
def test_estimate_only_per_call(benchmark: Any, case: str) -> None:
    request, prices = REQUESTS[case], PriceTable()
    chain = (PRIMARY, FALLBACK)
    benchmark.group = f"strict reservation facts: {case}"

    def estimate_only() -> float:
        tokens = estimate_tokens(request)
        return max(price.worst_case_usd(tokens, 1024) or 0.0 for config in chain
                   if (price := prices.price_for(config)) is not None)

    benchmark(estimate_only)
