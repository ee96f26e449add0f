"""Which bucket a call counts in, what a refusal reports, and leases renewed on every loop."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from provmw.config import ProviderConfig
from provmw.errors import BudgetExceededError
from provmw.middleware.budget import BudgetMiddleware, BudgetOptions
from provmw.responses import CompletionResponse, Usage
from provmw.stores.budgets import MemoryBudgetStore
from provmw.testing import FakeClock, ScriptedNext, call_context
from tests.middleware.test_budget import Renewals
from tests.virtual_time import run_virtual

CONFIG = ProviderConfig(identifier="oa", provider="openai", model="gpt-test")
NOON = dt.datetime(2026, 11, 22, 12, tzinfo=ZoneInfo("UTC")).timestamp()


def layer(*limits: dict[str, Any], store: Any = None, **options: Any) -> BudgetMiddleware:
    return BudgetMiddleware(BudgetOptions(limits=list(limits), timezone="UTC", **options),
                            store=store or MemoryBudgetStore(), wall_clock=FakeClock(NOON))


def spent(tokens: int) -> CompletionResponse:
    return CompletionResponse(provider="openai", model="gpt-test", text="ok",
                              usage=Usage(input_tokens=tokens, output_tokens=0, cost_usd=0.0))


async def test_a_global_limit_is_one_bucket_for_every_caller() -> None:
    middleware = layer({"scope": "global", "period": "day", "max_requests": 1})
    await middleware.handle(call_context(user="ada", tenant="acme"), CONFIG, ScriptedNext())
    with pytest.raises(BudgetExceededError) as refused:
        await middleware.handle(call_context(user="bob", tenant="globex"), CONFIG, ScriptedNext())
    assert refused.value.bucket == "global:*"


async def test_a_token_refusal_reports_tokens_not_dollars() -> None:
    middleware = layer({"scope": "global", "period": "day", "max_tokens": 60})
    facts: dict[str, Any] = {"estimated_input_tokens": 30, "max_input_tokens": 30, "max_output_tokens": 10}
    await middleware.handle(call_context(**facts), CONFIG, ScriptedNext(spent(35)))
    with pytest.raises(BudgetExceededError) as refused:
        await middleware.handle(call_context(**facts), CONFIG, ScriptedNext())
    error = refused.value
    assert (error.dimension, error.limit, error.spent, error.reserved) == ("tokens", 60, 35, 0)


def test_a_call_on_a_later_event_loop_still_renews_its_lease() -> None:
    store = Renewals()
    middleware = layer({"scope": "global", "period": "day", "max_cost_usd": 1.0}, store=store, lease_s=0.04)

    async def slow(config: ProviderConfig) -> CompletionResponse:
        await asyncio.sleep(0.1)  # ten quarter leases, on the loop's virtual time
        return spent(1)

    run_virtual(middleware.handle(call_context(planned_cost_usd=0.01), CONFIG, slow))  # one loop per call, as
    first = store.renewals                                                       # asyncio.run in a script
    run_virtual(middleware.handle(call_context(planned_cost_usd=0.01), CONFIG, slow))
    assert first >= 3 and store.renewals - first >= 3


class Recording(MemoryBudgetStore):
    """Records what is reserved and renewed."""

    def __init__(self) -> None:
        super().__init__()
        self.reserved: list[str] = []
        self.renewed: list[tuple[str, float, float]] = []

    async def reserve(self, reservation_id: str, charges: Any, *, now: float, lease_s: float) -> Any:
        self.reserved.append(reservation_id)
        return await super().reserve(reservation_id, charges, now=now, lease_s=lease_s)

    async def renew(self, reservation_id: str, *, now: float, lease_s: float) -> None:
        self.renewed.append((reservation_id, now, lease_s))


def test_a_running_call_renews_its_own_reservation_every_quarter_lease() -> None:
    store = Recording()
    middleware = layer({"scope": "global", "period": "day", "max_cost_usd": 1.0}, store=store, lease_s=0.4)

    async def slow(config: ProviderConfig) -> CompletionResponse:
        await asyncio.sleep(0.25)  # on the loop's virtual time: quarter leases end at 0.1 and 0.2
        return spent(1)

    run_virtual(middleware.handle(call_context(planned_cost_usd=0.01), CONFIG, slow))
    assert store.renewed == [(store.reserved[0], NOON, 0.4)] * 2


def test_a_call_that_began_within_the_last_quarter_lease_is_not_renewed_yet() -> None:
    store = Recording()
    middleware = layer({"scope": "global", "period": "day", "max_cost_usd": 1.0}, store=store, lease_s=0.4)

    async def lasting(seconds: float) -> Any:
        async def inner(config: ProviderConfig) -> CompletionResponse:
            await asyncio.sleep(seconds)
            return spent(1)
        return await middleware.handle(call_context(planned_cost_usd=0.01), CONFIG, inner)

    async def two_calls() -> None:
        first = asyncio.ensure_future(lasting(0.25))  # renewed at 0.1 and 0.2
        await asyncio.sleep(0.015)
        await lasting(0.1)  # 0.015 to 0.115: at the tick of 0.1 it had run 0.085 of a 0.1 quarter
        await first

    run_virtual(two_calls())
    assert [rid for rid, _, _ in store.renewed] == [store.reserved[0]] * 2
