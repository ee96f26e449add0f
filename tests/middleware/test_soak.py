"""The whole reliability stack under load, over real HTTP against the fake provider."""

from __future__ import annotations

import asyncio
import collections

import pytest

from provmw.errors import CircuitOpenError, ProviderUnavailableError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault
from tests.conftest import anthropic_config, openai_config

CALLS = 1_000
FAST_RETRY = {"base_s": 0.001, "max_wait_s": 0.01}


async def test_a_thousand_concurrent_calls_with_a_flaky_primary_all_succeed(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.fail_randomly(0.3, Fault(status=503), model="gpt-test", seed=11)
    settings = Settings(configurations={"oa": openai_config(fake, fallbacks=("an",)), "an": anthropic_config(fake)},
                        default="oa", middleware={"retry": FAST_RETRY})
    async with ServiceManager(settings, host=builtin_only) as manager:
        responses = await asyncio.gather(*(manager.chat(f"call {i}") for i in range(CALLS)))
    assert [r.text for r in responses] == [f"echo: call {i}" for i in range(CALLS)]
    reported = collections.Counter(a.config_id for r in responses for a in r.attempts)
    assert reported == {"oa": fake.count(model="gpt-test"), "an": fake.count(model="claude-test")}
    assert reported["an"] > 0  # the failed primaries were swapped, not surfaced


async def test_a_retry_storm_is_bounded_by_the_budget_and_the_breaker_opens(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.fail_randomly(1.0, Fault(status=503))
    settings = Settings(configurations={"oa": openai_config(fake)}, middleware={"retry": FAST_RETRY})
    async with ServiceManager(settings, host=builtin_only) as manager:
        results = await asyncio.gather(*(manager.chat("hi") for _ in range(CALLS)), return_exceptions=True)
        with pytest.raises(CircuitOpenError):
            await manager.chat("after the storm")
    assert all(isinstance(r, ProviderUnavailableError | CircuitOpenError) for r in results)
    assert fake.count() <= (1 + 0.2) * CALLS + 10


async def test_the_retry_budget_alone_bounds_a_sequential_storm(fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.fail_randomly(1.0, Fault(status=503))
    settings = Settings(configurations={"oa": openai_config(fake)},
                        middleware={"retry": FAST_RETRY, "circuit_breaker": {"enabled": False}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        for _ in range(CALLS):
            with pytest.raises(ProviderUnavailableError):
                await manager.chat("hi")
    assert CALLS < fake.count() <= (1 + 0.2) * CALLS + 10
