"""What the destination check adds per call (ADR 0018).

Goal: under 5 microseconds on the happy path of a named configuration (it is one attribute
test there). Reported beside it: an ad-hoc IP literal (classified, no DNS), an ad-hoc name
whose checked resolution is kept (TTL 10 s), and the same name resolved every call.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.conftest import run_batch
from provmw.config import ProviderConfig
from provmw.destinations import CheckingResolver, DestinationGuard, DestinationPolicy
from provmw.http import HttpClient

CALLS = 1_000
POLICY = DestinationPolicy(ad_hoc_destinations=("public", "loopback"))
NAMED = ProviderConfig(identifier="named", provider="openai", model="m", base_url="http://10.0.0.5/v1")
CASES = {
    "named": NAMED,
    "ad-hoc literal": ProviderConfig.ad_hoc("openai", "m", base_url="http://127.0.0.1:8080/v1"),
    "ad-hoc name, kept": ProviderConfig.ad_hoc("openai", "m", base_url="http://localhost:8080/v1"),
}


def _guard(ttl_s: float) -> DestinationGuard:
    guard = DestinationGuard(POLICY)
    guard.resolver = CheckingResolver(POLICY, ttl_s=ttl_s)
    return guard


@pytest.mark.parametrize("case", list(CASES))
def test_destination_check(benchmark: Any, loop: Any, case: str) -> None:
    guard, config, http = _guard(ttl_s=10.0), CASES[case], HttpClient()

    async def call() -> None:
        await guard.check(config)
        guard.client_for(config, http)

    benchmark.group = "destination check (1,000 calls)"
    benchmark(run_batch(loop, call, CALLS))


def test_destination_check_resolving_every_call(benchmark: Any, loop: Any) -> None:
    guard, config = _guard(ttl_s=0.0), CASES["ad-hoc name, kept"]
    benchmark.group = "destination check (1,000 calls)"
    benchmark(run_batch(loop, lambda: guard.check(config), CALLS))
