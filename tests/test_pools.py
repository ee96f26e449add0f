"""Deployment pools (ADR 0051): one name over deployments, a choice per attempt, over real HTTP."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest

from provmw.errors import ConfigurationError, PoolUnavailableError, RateLimitError, UnsupportedOperationError
from provmw.hookspecs import hookimpl
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.pools import Pool
from provmw.providers import ProviderAdapter
from provmw.settings import Settings, parse_settings
from provmw.testing import FakeProvider, Fault
from tests.conftest import anthropic_config, openai_config
from tests.providers.thirdparty_adapter import AcmeAdapter

MEMBERS = ("a", "b", "c", "d")
FAST_RETRY = {"retry": {"base_s": 0.001, "max_wait_s": 0.01, "max_attempts": 2}}


class AcmePlugin:
    @hookimpl
    def provmw_providers(self) -> list[ProviderAdapter]:
        return [AcmeAdapter()]


def pooled(fake: FakeProvider, strategy: str = "least_busy", *, members: tuple[str, ...] = MEMBERS,
           middleware: dict[str, Any] | None = None, **pool: Any) -> Settings:
    """Four deployments of one model, told apart by their model names on one fake provider."""
    configs = {m: openai_config(fake, identifier=m, model=f"dep-{m}") for m in members}
    return Settings(configurations=configs, pools={"gpt": Pool(name="gpt", members=members, strategy=strategy, **pool)},
                    default="gpt", middleware={**FAST_RETRY, **(middleware or {})})


def served(fake: FakeProvider) -> collections.Counter[str]:
    return collections.Counter(r.model for r in fake.received)


async def test_a_call_on_a_pool_is_served_by_one_of_its_deployments(fake: FakeProvider,
                                                                     builtin_only: PluginHost) -> None:
    async with ServiceManager(pooled(fake), host=builtin_only) as manager:
        response = await manager.chat("hi", configuration="gpt")
    assert response.served_by in MEMBERS and fake.count() == 1


async def test_least_busy_shares_concurrent_calls_evenly(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(pooled(fake), host=builtin_only) as manager:
        await asyncio.gather(*(manager.chat(f"q{i}") for i in range(400)))
    assert max(served(fake).values()) <= 0.3 * 400


async def test_a_failing_deployment_is_retried_on_another(fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.script(*[Fault(status=503)] * 50, model="dep-a")
    async with ServiceManager(pooled(fake, "order"), host=builtin_only) as manager:
        response = await manager.chat("hi")
    assert response.served_by == "b"
    assert [a.config_id for a in response.attempts] == ["a", "b"]


async def test_an_open_breaker_sends_the_call_elsewhere_at_once(fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.script(*[Fault(status=503)] * 50, model="dep-a")
    breaker = {"circuit_breaker": {"min_calls": 1, "window_size": 1}}
    async with ServiceManager(pooled(fake, "order", middleware=breaker), host=builtin_only) as manager:
        await manager.chat("first")  # a fails once: its breaker opens
        before = fake.count(model="dep-a")
        response = await manager.chat("second")
    assert response.served_by == "b" and fake.count(model="dep-a") == before


async def test_order_takes_the_first_deployment(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(pooled(fake, "order"), host=builtin_only) as manager:
        for _ in range(5):
            await manager.chat("hi")
    assert served(fake) == {"dep-a": 5}


async def test_weighted_follows_the_weights(fake: FakeProvider, builtin_only: PluginHost) -> None:
    settings = pooled(fake, "weighted", weights={"a": 0, "b": 0, "c": 0, "d": 1})
    async with ServiceManager(settings, host=builtin_only) as manager:
        for _ in range(5):
            await manager.chat("hi")
    assert served(fake) == {"dep-d": 5}


async def test_a_session_stays_with_its_deployment(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(pooled(fake, "affinity"), host=builtin_only) as manager:
        answers = [await manager.chat(f"turn {i}", controls={"session": "s1"}) for i in range(8)]
    assert len({a.served_by for a in answers}) == 1


async def test_a_deployment_can_be_pinned(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(pooled(fake), host=builtin_only) as manager:
        response = await manager.chat("hi", controls={"deployment": "c"})
    assert response.served_by == "c"


async def test_excluded_deployments_are_not_chosen(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(pooled(fake, "order"), host=builtin_only) as manager:
        response = await manager.chat("hi", controls={"exclude_deployments": ["a", "b"]})
    assert response.served_by == "c"


async def test_a_deployment_at_its_minute_limit_is_passed_over(fake: FakeProvider, builtin_only: PluginHost) -> None:
    settings = pooled(fake, "order", rpm={"a": 2})
    async with ServiceManager(settings, host=builtin_only) as manager:
        answers = [await manager.chat("hi") for _ in range(4)]
    assert [a.served_by for a in answers] == ["a", "a", "b", "b"]


async def test_a_pool_with_every_deployment_at_its_limit_is_unavailable(fake: FakeProvider,
                                                                        builtin_only: PluginHost) -> None:
    settings = pooled(fake, "order", members=("a",), rpm={"a": 1})
    async with ServiceManager(settings, host=builtin_only) as manager:
        await manager.chat("hi")
        with pytest.raises(PoolUnavailableError, match="a: at its limit in the last minute"):
            await manager.chat("hi")


async def test_a_429_moves_the_call_to_another_deployment_at_once(fake: FakeProvider,
                                                                    builtin_only: PluginHost) -> None:
    fake.script(Fault(status=429, headers={"retry-after": "30"}), model="dep-a")
    settings = pooled(fake, "order", middleware={"retry": {"max_attempts": 1}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        response = await manager.chat("hi")
    assert response.served_by == "b" and [a.config_id for a in response.attempts] == ["a", "b"]


async def test_a_deployment_that_answered_429_with_a_hint_cools_down(fake: FakeProvider,
                                                                     builtin_only: PluginHost) -> None:
    fake.script(Fault(status=429, headers={"retry-after": "30"}), model="dep-a")
    async with ServiceManager(pooled(fake, "order"), host=builtin_only) as manager:
        await manager.chat("hi")
        response = await manager.chat("hi")
    assert response.served_by == "b" and fake.count(model="dep-a") == 1


async def test_a_pool_whose_only_deployment_answers_429_raises_it(fake: FakeProvider,
                                                                  builtin_only: PluginHost) -> None:
    fake.script(Fault(status=429, headers={"retry-after": "30"}), model="dep-a")
    settings = pooled(fake, "order", members=("a",), middleware={"retry": {"max_attempts": 1}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        with pytest.raises(RateLimitError):
            await manager.chat("hi")


async def test_an_inactive_deployment_is_not_chosen(fake: FakeProvider, builtin_only: PluginHost) -> None:
    configs = {"a": openai_config(fake, identifier="a", model="dep-a", active=False),
               "b": openai_config(fake, identifier="b", model="dep-b")}
    settings = Settings(configurations=configs, pools={"gpt": Pool(name="gpt", members=("a", "b"), strategy="order")},
                        default="gpt")
    async with ServiceManager(settings, host=builtin_only) as manager:
        response = await manager.chat("hi")
    assert response.served_by == "b"


async def test_a_pool_falls_back_to_another_model(fake: FakeProvider, builtin_only: PluginHost) -> None:
    settings = Settings(configurations={"a": openai_config(fake, identifier="a", model="dep-a"),
                                        "claude": anthropic_config(fake, identifier="claude")},
                        pools={"gpt": Pool(name="gpt", members=("a",), fallbacks=("claude",))}, default="gpt",
                        middleware=FAST_RETRY)
    fake.script(*[Fault(status=503)] * 5, model="dep-a")
    async with ServiceManager(settings, host=builtin_only) as manager:
        response = await manager.chat("hi")
    assert response.served_by == "claude"


async def test_a_structured_call_skips_the_deployment_that_cannot_honour_it(fake: FakeProvider,
                                                                           builtin_only: PluginHost) -> None:
    settings = Settings(configurations={"plain": openai_config(fake, identifier="plain", provider="acme"),
                                        "able": openai_config(fake, identifier="able", model="dep-able")},
                        pools={"gpt": Pool(name="gpt", members=("plain", "able"), strategy="order")}, default="gpt")
    builtin_only.register(AcmePlugin(), "acme")  # an adapter without schema support
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    async with ServiceManager(settings, host=builtin_only) as manager:
        response = await manager.chat("Paris", response_schema=schema)
    assert response.served_by == "able"


def test_inline_deployments_inherit_their_base() -> None:
    settings = parse_settings({
        "configurations": {"east": {"provider": "openai", "model": "gpt-4o", "base_url": "https://east.example/v1"}},
        "pools": {"gpt-4o": {"members": ["east"], "strategy": "latency",
                             "deployments": {"west": {"base": "east", "base_url": "https://west.example/v1"}}}},
        "aliases": {"gpt4": "gpt-4o"}}, "provmw.toml", {})
    west = settings.configurations["gpt-4o/west"]
    assert (west.model, west.base_url) == ("gpt-4o", "https://west.example/v1")
    assert settings.pools["gpt-4o"].members == ("east", "gpt-4o/west")
    assert settings.named("gpt4").identifier == "gpt-4o"


def test_a_pool_member_must_be_a_configuration() -> None:
    with pytest.raises(ConfigurationError, match=r"members: 'eats' names no configuration \(did you mean 'east'\?\)"):
        parse_settings({"configurations": {"east": {"provider": "openai", "model": "m"}},
                        "pools": {"p": {"members": ["eats"]}}}, "provmw.toml", {})


def test_an_unknown_strategy_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="strategy"):
        Pool(name="p", members=("a",), strategy="fastest")


async def test_a_pool_none_of_whose_deployments_can_honour_the_call_names_each(fake: FakeProvider,
                                                                               builtin_only: PluginHost) -> None:
    settings = Settings(configurations={"plain": openai_config(fake, identifier="plain", provider="acme")},
                        pools={"gpt": Pool(name="gpt", members=("plain",))}, default="gpt")
    builtin_only.register(AcmePlugin(), "acme")  # an adapter without schema support
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    async with ServiceManager(settings, host=builtin_only) as manager:
        with pytest.raises(UnsupportedOperationError, match="plain lacks schema"):
            await manager.chat("Paris", response_schema=schema)
    assert fake.count() == 0
