"""A pool among the other layers, over real HTTP: in a fallback chain, under a budget scoped to
it, and over deployments that differ in what they can do (ADR 0051). The single-member fallback
and the structured call with ``order`` are in ``tests/test_pools.py``."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from provmw.errors import BudgetExceededError, UnsupportedOperationError
from provmw.hookspecs import hookimpl
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.pools import Pool
from provmw.providers import ProviderAdapter
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault
from tests.conftest import anthropic_config, openai_config
from tests.providers.thirdparty_adapter import AcmeAdapter
from tests.test_pools import FAST_RETRY, MEMBERS

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


class AcmePlugin:
    @hookimpl
    def provmw_providers(self) -> list[ProviderAdapter]:
        return [AcmeAdapter()]


def chain(fake: FakeProvider, *, middleware: dict[str, Any] | None = None, **pool: Any) -> Settings:
    """``primary`` falls back to the pool ``gpt`` (four deployments), which falls back to ``claude``."""
    configs = {m: openai_config(fake, identifier=m, model=f"dep-{m}") for m in MEMBERS}
    configs["primary"] = openai_config(fake, identifier="primary", model="primary", fallbacks=("gpt",))
    configs["claude"] = anthropic_config(fake, identifier="claude")
    pools = {"gpt": Pool(name="gpt", members=MEMBERS, fallbacks=("claude",), **pool)}
    return Settings(configurations=configs, pools=pools, default="primary", middleware={**FAST_RETRY,
                                                                                        **(middleware or {})})


async def test_a_pool_in_a_fallback_chain_serves_when_the_configuration_before_it_fails(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.fail_randomly(1.0, Fault(status=503), model="primary")
    async with ServiceManager(chain(fake), host=builtin_only) as manager:
        response = await manager.chat("hi")
    assert response.served_by in MEMBERS
    assert [a.config_id for a in response.attempts][-1] == response.served_by


async def test_retry_bounds_the_attempts_over_the_whole_pool_before_the_chain_moves_on(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    for member in MEMBERS:
        fake.fail_randomly(1.0, Fault(status=503), model=f"dep-{member}")
    async with ServiceManager(chain(fake), host=builtin_only) as manager:
        response = await manager.chat("hi", configuration="gpt")
    tried = [a.config_id for a in response.attempts]
    assert response.served_by == "claude"
    assert len(tried) == 3 and len(set(tried[:2])) == 2 and set(tried[:2]) <= set(MEMBERS)  # max_attempts = 2


def pool_budget(**limit: Any) -> dict[str, Any]:
    return {"budget": {"mode": "strict", "limits": [{"scope": "configuration", "match": "gpt", "period": "day",
                                                     **limit}]}}


async def test_a_budget_scoped_to_a_pool_counts_the_calls_of_all_its_deployments(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    settings = chain(fake, middleware=pool_budget(max_requests=6))
    async with ServiceManager(settings, host=builtin_only) as manager:
        answers = [await manager.chat(f"q{i}", configuration="gpt", controls={"deployment": MEMBERS[i % 4]})
                   for i in range(6)]
        with pytest.raises(BudgetExceededError):
            await manager.chat("one too many", configuration="gpt")
    assert {a.served_by for a in answers} == set(MEMBERS)
    assert fake.count() == 6


async def test_a_budget_scoped_to_a_pool_leaves_the_chain_before_it_alone(fake: FakeProvider,
                                                                          builtin_only: PluginHost) -> None:
    settings = chain(fake, middleware=pool_budget(max_requests=0))
    async with ServiceManager(settings, host=builtin_only) as manager:
        response = await manager.chat("hi")  # primary answers: the pool's budget is not asked
    assert response.served_by == "primary"


async def test_a_strict_budget_on_a_pool_reserves_its_dearest_deployments_worst_case(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    configs = {"cheap": openai_config(fake, identifier="cheap", model="dep-cheap",
                                      price={"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 1.0}),
               "dear": openai_config(fake, identifier="dear", model="dep-dear",
                                     price={"input_usd_per_mtok": 100.0, "output_usd_per_mtok": 100.0})}
    settings = Settings(configurations=configs, default="gpt", middleware=pool_budget(max_cost_usd=0.01),
                        pools={"gpt": Pool(name="gpt", members=("cheap", "dear"), strategy="order")})
    async with ServiceManager(settings, host=builtin_only) as manager:
        # 1,000 output tokens: $0.001 on cheap, $0.1 on dear; the pool may send to either
        with pytest.raises(BudgetExceededError):
            await manager.chat("hi", max_tokens=1_000)
    assert fake.count() == 0


def mixed(fake: FakeProvider, strategy: str = "least_busy", fallbacks: tuple[str, ...] = ()) -> Settings:
    """A pool of two deployments that honour a response schema and two (``acme``) that cannot."""
    configs = {m: openai_config(fake, identifier=m, model=f"dep-{m}", provider="acme" if m in "ab" else "openai")
               for m in MEMBERS}
    configs["able"] = openai_config(fake, identifier="able", model="dep-able")
    return Settings(configurations=configs, default="gpt", middleware=FAST_RETRY,
                    pools={"gpt": Pool(name="gpt", members=MEMBERS, strategy=strategy, fallbacks=fallbacks)})


async def test_structured_calls_go_only_to_the_deployments_able_to_honour_them(fake: FakeProvider,
                                                                               builtin_only: PluginHost) -> None:
    builtin_only.register(AcmePlugin(), "acme")
    async with ServiceManager(mixed(fake), host=builtin_only) as manager:
        structured = [await manager.chat(f"city {i}", response_schema=SCHEMA) for i in range(40)]
        plain = [await manager.chat(f"q {i}") for i in range(40)]
    assert {r.served_by for r in structured} <= {"c", "d"}
    assert {"a", "b"} <= set(collections.Counter(r.served_by for r in plain))


async def test_a_pinned_deployment_that_cannot_honour_the_call_is_refused_before_sending(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    builtin_only.register(AcmePlugin(), "acme")
    async with ServiceManager(mixed(fake), host=builtin_only) as manager:
        with pytest.raises(UnsupportedOperationError, match="configuration 'a'"):
            await manager.chat("Paris", response_schema=SCHEMA, controls={"deployment": "a"})
    assert fake.count() == 0


async def test_a_pool_none_of_whose_deployments_can_honour_the_call_is_skipped_in_a_chain(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    builtin_only.register(AcmePlugin(), "acme")
    fake.fail_randomly(1.0, Fault(status=503), model="primary")
    configs = {m: openai_config(fake, identifier=m, model=f"dep-{m}", provider="acme") for m in ("a", "b")}
    configs["primary"] = openai_config(fake, identifier="primary", model="primary", fallbacks=("gpt", "able"))
    configs["able"] = openai_config(fake, identifier="able", model="dep-able")
    settings = Settings(configurations=configs, default="primary", middleware=FAST_RETRY,
                        pools={"gpt": Pool(name="gpt", members=("a", "b"))})
    async with ServiceManager(settings, host=builtin_only) as manager:
        response = await manager.chat("Paris", response_schema=SCHEMA)
    assert response.served_by == "able"
    assert fake.count(model="dep-a") == fake.count(model="dep-b") == 0
