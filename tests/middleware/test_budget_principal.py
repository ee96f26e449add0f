"""Budgets a call's principal holds (a virtual key's, its team's, its user's, its organisation's: ADR 0055) apply
with the configured ones, each in its own bucket, and the strictest binds."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from provmw.context import Principal
from provmw.errors import BudgetExceededError, ConfigurationError
from provmw.manager import ServiceManager
from provmw.middleware.budget import BudgetLimit
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import openai_config

PRICE = {"input_usd_per_mtok": 1000.0, "output_usd_per_mtok": 1000.0, "max_output_tokens": 100}


def manager(fake: FakeProvider, host: PluginHost, tmp_path: Path, **budget: object) -> ServiceManager:
    config = openai_config(fake, price=PRICE, options={"max_tokens": 10})
    return ServiceManager(Settings(configurations={"oa": config}, middleware={
        "budget": {"path": str(tmp_path / "b.sqlite3"), **budget}}), host=host)


def principal(key: str, *limits: BudgetLimit, team: str = "blue", organisation: str = "acme") -> Principal:
    return Principal(key=key, team=team, organisation=organisation, budgets=limits)


def limit(scope: str, max_requests: int) -> BudgetLimit:
    return BudgetLimit(scope=scope, period="total", max_requests=max_requests)  # type: ignore[arg-type]


async def test_a_keys_budget_binds_its_calls_only(fake: FakeProvider, builtin_only: PluginHost,
                                                 tmp_path: Path) -> None:
    one, other = principal("k1", limit("key", 1)), principal("k2", limit("key", 1))
    async with manager(fake, builtin_only, tmp_path) as m:
        await m.chat("hi", principal=one)
        with pytest.raises(BudgetExceededError, match="key:k1"):
            await m.chat("again", principal=one)
        await m.chat("hi", principal=other)
    assert fake.count() == 2


async def test_a_teams_budget_binds_every_key_of_the_team(fake: FakeProvider, builtin_only: PluginHost,
                                                          tmp_path: Path) -> None:
    team = limit("team", 2)
    async with manager(fake, builtin_only, tmp_path) as m:
        await m.chat("a", principal=principal("k1", team))
        await m.chat("b", principal=principal("k2", team))
        with pytest.raises(BudgetExceededError, match="team:acme/blue"):
            await m.chat("c", principal=principal("k3", team))
        await m.chat("d", principal=principal("k4", team, team="red"))


async def test_the_configured_limits_still_apply_to_a_principals_call(fake: FakeProvider, builtin_only: PluginHost,
                                                                      tmp_path: Path) -> None:
    limits = [{"scope": "global", "period": "total", "max_requests": 1}]
    async with manager(fake, builtin_only, tmp_path, limits=limits) as m:
        await m.chat("a", principal=principal("k1", limit("organisation", 10)))
        with pytest.raises(BudgetExceededError, match="global"):
            await m.chat("b", principal=principal("k1", limit("organisation", 10)))


async def test_a_principal_scope_does_not_bind_a_call_without_a_principal(fake: FakeProvider,
                                                                          builtin_only: PluginHost,
                                                                          tmp_path: Path) -> None:
    limits = [{"scope": "key", "period": "total", "max_requests": 0}]
    async with manager(fake, builtin_only, tmp_path, limits=limits) as m:
        await m.chat("a")
        with pytest.raises(BudgetExceededError):
            await m.chat("b", principal=principal("k1"))


async def test_a_users_budget_binds_every_key_of_the_user_in_its_organisation_only(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    grace = limit("user", 1)
    async with manager(fake, builtin_only, tmp_path) as m:
        await m.chat("a", principal=attrs.evolve(principal("k1", grace), user="grace"))
        with pytest.raises(BudgetExceededError, match="user:acme/grace"):
            await m.chat("b", principal=attrs.evolve(principal("k2", grace), user="grace"))
        await m.chat("c", principal=attrs.evolve(principal("k3", grace, organisation="globex"), user="grace"))


async def test_a_configured_user_limit_gives_two_organisations_users_of_one_name_a_bucket_each(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    limits = [{"scope": "user", "period": "total", "max_requests": 1}]
    async with manager(fake, builtin_only, tmp_path, limits=limits) as m:
        await m.chat("a", user="grace", principal=attrs.evolve(principal("k1"), user="grace"))
        await m.chat("b", user="grace", principal=attrs.evolve(principal("k2", organisation="globex"), user="grace"))
        with pytest.raises(BudgetExceededError, match="user:acme/grace"):
            await m.chat("c", user="grace", principal=attrs.evolve(principal("k3"), user="grace"))


def test_a_principal_refuses_a_whole_key_for_its_id_without_repeating_it() -> None:
    whole = "pmk_0123456789ab_" + "s3cret" * 7 + "x"
    with pytest.raises(ConfigurationError, match="public id") as refused:
        Principal(key=whole)
    assert "s3cret" not in str(refused.value)
