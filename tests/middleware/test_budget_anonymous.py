"""Calls that name no user or tenant share the "(none)" bucket under user- and tenant-scoped limits."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from provmw.config import ProviderConfig
from provmw.errors import BudgetExceededError
from provmw.middleware.budget import ANONYMOUS, BudgetMiddleware, BudgetOptions
from provmw.stores.budgets import MemoryBudgetStore
from provmw.testing import FakeClock, ScriptedNext, call_context

CONFIG = ProviderConfig(identifier="oa", provider="openai", model="gpt-test")
NOON = dt.datetime(2026, 11, 22, 12, tzinfo=ZoneInfo("UTC")).timestamp()


def one_call_each(scope: str) -> BudgetMiddleware:
    options = BudgetOptions(limits=[{"scope": scope, "period": "day", "max_requests": 1}], timezone="UTC")
    return BudgetMiddleware(options, store=MemoryBudgetStore(), wall_clock=FakeClock(NOON))


@pytest.mark.parametrize("scope", ["user", "tenant"])
async def test_anonymous_calls_share_one_bucket_and_cannot_escape_the_limit(scope: str) -> None:
    middleware = one_call_each(scope)
    await middleware.handle(call_context(planned_cost_usd=0.0), CONFIG, ScriptedNext())
    with pytest.raises(BudgetExceededError) as refused:
        await middleware.handle(call_context(planned_cost_usd=0.0), CONFIG, ScriptedNext())
    assert refused.value.bucket == f"{scope}:{ANONYMOUS}" == f"{scope}:(none)"


@pytest.mark.parametrize("scope", ["user", "tenant"])
async def test_an_empty_name_counts_in_the_anonymous_bucket(scope: str) -> None:
    middleware = one_call_each(scope)
    await middleware.handle(call_context(planned_cost_usd=0.0), CONFIG, ScriptedNext())
    nameless = call_context(planned_cost_usd=0.0, user="") if scope == "user" else \
        call_context(planned_cost_usd=0.0, tenant="")
    with pytest.raises(BudgetExceededError, match=r"\(none\)"):
        await middleware.handle(nameless, CONFIG, ScriptedNext())
