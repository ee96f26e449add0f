"""The budget middleware: strict reservations, settle and release, periods, refusals."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import BudgetExceededError, BudgetUnavailableError, ConfigurationError, ProviderUnavailableError
from provmw.manager import ServiceManager
from provmw.middleware.budget import BudgetMiddleware, BudgetOptions
from provmw.plugins import PluginHost
from provmw.responses import CompletionResponse, Usage
from provmw.settings import Settings
from provmw.stores.budgets import Amounts, BucketState, Charge, MemoryBudgetStore, Refusal
from provmw.stores.budgets.sqlite import SqliteBudgetStore
from provmw.stores.outage import GuardedBudgets
from provmw.testing import FakeClock, FakeProvider, ScriptedNext, call_context
from tests.conftest import anthropic_config, openai_config
from tests.virtual_time import run_virtual

CONFIG = ProviderConfig(identifier="oa", provider="openai", model="gpt-test")
LA = ZoneInfo("America/Los_Angeles")
NOON = dt.datetime(2026, 11, 22, 12, tzinfo=LA).timestamp()


def ctx(planned_usd: float | None = 0.01, **facts: Any) -> ProviderCallContext:
    values = {"planned_cost_usd": planned_usd, "estimated_input_tokens": 10, "max_output_tokens": 20, **facts}
    return call_context(**values)


def answer(cost_usd: float | None = 0.006, tokens: int = 30) -> CompletionResponse:
    return CompletionResponse(provider="openai", model="gpt-test", served_by="oa", text="ok",
                              usage=Usage(input_tokens=tokens - 5, output_tokens=5, cost_usd=cost_usd))


def budget(*limits: dict[str, Any], store: Any = None, clock: Any = None, **options: Any) -> BudgetMiddleware:
    return BudgetMiddleware(BudgetOptions(limits=list(limits), timezone="America/Los_Angeles", **options),
                            store=store or MemoryBudgetStore(), wall_clock=clock or FakeClock(NOON))


async def state(middleware: BudgetMiddleware, now: float = NOON) -> list[BucketState]:
    return await middleware.store.states(now=now)


async def test_a_call_over_budget_is_refused_before_it_goes_out() -> None:
    middleware = budget({"scope": "user", "period": "day", "max_cost_usd": 0.005})
    upstream = ScriptedNext()
    with pytest.raises(BudgetExceededError):
        await middleware.handle(ctx(user="mallory"), CONFIG, upstream)
    assert upstream.calls == []


async def test_the_refusal_names_bucket_limit_spent_reserved_period_and_reset() -> None:
    middleware = budget({"scope": "user", "period": "day", "max_cost_usd": 0.015})
    await middleware.handle(ctx(user="mallory"), CONFIG, ScriptedNext(answer(0.006)))
    with pytest.raises(BudgetExceededError) as refused:
        await middleware.handle(ctx(user="mallory"), CONFIG, ScriptedNext())
    error = refused.value
    assert (error.bucket, error.dimension, error.limit, error.spent, error.reserved) == \
        ("user:mallory", "cost_usd", 0.015, 0.006, 0.0)
    assert (error.period, error.resets_at) == ("day 2026-11-22", "2026-11-23T00:00:00-08:00")


async def test_settling_charges_the_real_cost_not_the_reservation() -> None:
    middleware = budget({"scope": "global", "period": "total", "max_cost_usd": 1.0})
    await middleware.handle(ctx(0.01), CONFIG, ScriptedNext(answer(0.006, tokens=30)))
    [bucket] = await state(middleware)
    assert (bucket.spent, bucket.reserved) == (Amounts(6_000, 30, 1), Amounts())


async def test_negative_usage_is_never_credited_back_to_the_bucket() -> None:
    middleware = budget({"scope": "global", "period": "total", "max_cost_usd": 1.0})
    hostile = answer(-1.0, tokens=-100)
    await middleware.handle(ctx(0.01), CONFIG, ScriptedNext(hostile))
    [bucket] = await state(middleware)
    assert (bucket.spent, bucket.reserved) == (Amounts(0, 0, 1), Amounts())


async def test_a_failure_with_no_usage_releases_everything() -> None:
    middleware = budget({"scope": "global", "period": "total", "max_cost_usd": 1.0})
    with pytest.raises(ProviderUnavailableError):
        await middleware.handle(ctx(), CONFIG, ScriptedNext(ProviderUnavailableError("down", status=503)))
    [bucket] = await state(middleware)
    assert (bucket.spent, bucket.reserved) == (Amounts(), Amounts())


async def test_a_cancelled_call_releases_its_reservation() -> None:
    middleware = budget({"scope": "global", "period": "total", "max_cost_usd": 1.0})
    with pytest.raises(asyncio.CancelledError):
        await middleware.handle(ctx(), CONFIG, ScriptedNext(asyncio.CancelledError()))
    [bucket] = await state(middleware)
    assert bucket.reserved == Amounts()


async def test_a_limit_for_one_user_leaves_others_alone() -> None:
    middleware = budget({"scope": "user", "match": "mallory", "max_requests": 0})
    await middleware.handle(ctx(user="ada"), CONFIG, ScriptedNext())
    with pytest.raises(BudgetExceededError, match="requests"):
        await middleware.handle(ctx(user="mallory"), CONFIG, ScriptedNext())


async def test_each_tenant_has_a_bucket_of_its_own() -> None:
    middleware = budget({"scope": "tenant", "max_requests": 1})
    await middleware.handle(ctx(tenant="acme"), CONFIG, ScriptedNext())
    await middleware.handle(ctx(tenant="globex"), CONFIG, ScriptedNext())
    with pytest.raises(BudgetExceededError, match="tenant:acme"):
        await middleware.handle(ctx(tenant="acme"), CONFIG, ScriptedNext())


async def test_a_configuration_limit_counts_calls_on_that_configuration() -> None:
    middleware = budget({"scope": "configuration", "match": "oa", "max_tokens": 40})
    await middleware.handle(ctx(), CONFIG, ScriptedNext(answer(tokens=30)))
    with pytest.raises(BudgetExceededError, match="configuration:oa"):
        await middleware.handle(ctx(), CONFIG, ScriptedNext())  # reserves 10 + 20 more tokens


async def test_strict_mode_refuses_a_call_whose_worst_case_cost_is_unknown() -> None:
    middleware = budget({"scope": "global", "max_cost_usd": 1.0})
    with pytest.raises(ConfigurationError, match="worst-case cost .* is unknown"):
        await middleware.handle(ctx(None), CONFIG, ScriptedNext())


async def test_estimate_mode_lets_an_unpriced_call_through() -> None:
    middleware = budget({"scope": "global", "max_cost_usd": 1.0}, mode="estimate")
    assert (await middleware.handle(ctx(None), CONFIG, ScriptedNext(answer(None)))).text == "ok"


async def test_no_limits_means_no_store_is_ever_opened(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    settings = Settings(configurations={"oa": openai_config(fake)},
                        middleware={"budget": {"path": str(tmp_path / "budget.db")}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        await manager.chat("hi")
    assert not (tmp_path / "budget.db").exists()


def test_an_unknown_time_zone_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="unknown time zone 'Mars/Olympus'"):
        BudgetOptions(timezone="Mars/Olympus")


def test_a_limit_without_a_maximum_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"limits\[0\]: a user limit needs max_cost_usd"):
        BudgetOptions(limits=[{"scope": "user"}])


class Watched(MemoryBudgetStore):
    """The memory store, checking after every step that spend plus reservations fit the limit."""

    def __init__(self, limit_micro_usd: int) -> None:
        super().__init__()
        self.limit = limit_micro_usd
        self.peak = 0

    async def reserve(self, reservation_id: str, charges: Sequence[Charge], *, now: float,
                      lease_s: float) -> Refusal | None:
        refusal = await super().reserve(reservation_id, charges, now=now, lease_s=lease_s)
        await self._check(now)
        return refusal

    async def settle(self, reservation_id: str, actual: Amounts) -> None:
        await super().settle(reservation_id, actual)
        await self._check(NOON)

    async def _check(self, now: float) -> None:
        for bucket in await self.states(now=now):
            self.peak = max(self.peak, bucket.spent.cost_micro_usd + bucket.reserved.cost_micro_usd)


async def race(mode: str, planned_usd: float | None) -> tuple[Watched, int, list[CompletionResponse | BaseException]]:
    store = Watched(1_000_000)
    middleware = budget({"scope": "global", "period": "total", "max_cost_usd": 1.0}, store=store, mode=mode)
    upstream = 0

    async def provider(config: ProviderConfig) -> CompletionResponse:
        nonlocal upstream
        upstream += 1
        await asyncio.sleep(0.001)
        return answer(0.006)

    calls = [middleware.handle(ctx(planned_usd), CONFIG, provider) for _ in range(1000)]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    return store, upstream, outcomes


async def test_strict_race_never_commits_or_reserves_past_the_limit() -> None:
    store, upstream, outcomes = await race("strict", 0.01)
    served = [o for o in outcomes if isinstance(o, CompletionResponse)]
    refused = [o for o in outcomes if isinstance(o, BudgetExceededError)]
    assert len(served) + len(refused) == 1000
    assert store.peak <= 1_000_000
    assert upstream == len(served)  # a refused call made no upstream attempt
    assert len(served) >= 100


async def test_without_reservations_the_same_race_overspends() -> None:
    store, upstream, _ = await race("estimate", None)  # reserves nothing: check, then spend
    assert upstream == 1000
    assert store.peak == 1000 * 6_000  # six dollars spent against a one-dollar limit


async def test_windows_roll_at_local_midnight_and_sum_to_the_total() -> None:
    clock = FakeClock(dt.datetime(2026, 3, 7, 0, 30, tzinfo=LA).timestamp())
    middleware = budget({"scope": "global", "period": "day", "max_requests": 100},
                        {"scope": "global", "period": "month", "max_requests": 100},
                        {"scope": "global", "period": "total", "max_requests": 1000}, clock=clock)
    instants = [dt.datetime(2026, *moment, tzinfo=LA) for moment in (
        (3, 7, 23, 59), (3, 8, 0, 0), (3, 8, 1, 59), (3, 8, 3, 0), (3, 8, 23, 59), (3, 9, 0, 0),
        (10, 31, 23, 59), (11, 1, 0, 0), (11, 1, 1, 30), (11, 1, 23, 59), (11, 2, 0, 1),
        (1, 31, 23, 59), (2, 1, 0, 0))]
    for instant in instants:
        clock.now = instant.timestamp()
        await middleware.handle(ctx(), CONFIG, ScriptedNext())
    states = {(s.bucket.period, s.bucket.window): s.spent.requests for s in await state(middleware, clock.now)}
    days = {w: n for (p, w), n in states.items() if p == "day"}
    assert days == {"2026-03-07": 1, "2026-03-08": 4, "2026-03-09": 1, "2026-10-31": 1, "2026-11-01": 3,
                    "2026-11-02": 1, "2026-01-31": 1, "2026-02-01": 1}
    months = {w: n for (p, w), n in states.items() if p == "month"}
    assert months == {"2026-01": 1, "2026-02": 1, "2026-03": 6, "2026-10": 1, "2026-11": 4}
    assert sum(days.values()) == sum(months.values()) == states[("total", "total")] == len(instants)


async def test_a_cache_hit_is_never_charged(fake: FakeProvider, builtin_only: PluginHost) -> None:
    settings = Settings(configurations={"oa": openai_config(fake)}, middleware={
        "budget": {"store": "memory", "limits": [{"scope": "user", "max_requests": 1}]},
        "usage": {"store": "memory"}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        await manager.embed("same", user="ada")
        second = await manager.embed("same", user="ada")  # over budget, but answered by the cache
        with pytest.raises(BudgetExceededError):
            await manager.embed("different", user="ada")
    assert second.cached
    assert fake.count() == 1


async def test_the_manager_plans_the_worst_case_over_the_fallback_chain(fake: FakeProvider,
                                                                        builtin_only: PluginHost) -> None:
    cheap = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 1.0}
    dear = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 100.0}
    settings = Settings(configurations={"oa": openai_config(fake, fallbacks=("an",), price=cheap),
                                        "an": anthropic_config(fake, price=dear)}, default="oa", middleware={
        "budget": {"store": "memory", "limits": [{"scope": "global", "max_cost_usd": 0.01}]},
        "usage": {"store": "memory"}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        await manager.chat("hi", options={"max_tokens": 90})  # at most 90 x $100 / M = $0.009
        with pytest.raises(BudgetExceededError):
            await manager.chat("hi", options={"max_tokens": 110})  # the backup could cost $0.011
    assert fake.count() == 1


class DownStore(MemoryBudgetStore):
    """A store that cannot be reached."""

    async def reserve(self, reservation_id: str, charges: Sequence[Charge], *, now: float,
                      lease_s: float) -> Refusal | None:
        raise ConnectionError("budget store down")


async def test_a_store_that_cannot_reserve_refuses_the_call_before_it_goes_out() -> None:
    middleware = budget({"scope": "global", "period": "day", "max_cost_usd": 1.0}, store=GuardedBudgets(DownStore()))
    upstream = ScriptedNext()
    with pytest.raises(BudgetUnavailableError, match="budget store down.*fail_closed"):
        await middleware.handle(ctx(), CONFIG, upstream)
    assert upstream.calls == []


async def test_fail_open_lets_calls_go_uncounted_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    middleware = budget({"scope": "global", "period": "day", "max_cost_usd": 1.0},
                        store=GuardedBudgets(DownStore(), "fail_open"))
    upstream = ScriptedNext(answer(), answer(), answer())
    for _ in range(3):
        await middleware.handle(ctx(), CONFIG, upstream)
    assert len(upstream.calls) == 3
    assert caplog.text.count("calls go uncounted") == 1


class Renewals(MemoryBudgetStore):
    """Counts renewals; ``failing`` makes each one fail."""

    def __init__(self, failing: bool = False) -> None:
        super().__init__()
        self.failing, self.renewals = failing, 0

    async def renew(self, reservation_id: str, *, now: float, lease_s: float) -> None:
        self.renewals += 1
        if self.failing:
            raise ConnectionError("budget store down")


async def slow_answer(config: ProviderConfig) -> CompletionResponse:
    await asyncio.sleep(0.1)
    return answer()


def test_a_long_call_renews_its_lease_while_it_runs() -> None:
    store = Renewals()
    middleware = budget({"scope": "global", "period": "day", "max_cost_usd": 1.0}, store=store, lease_s=0.04)
    run_virtual(middleware.handle(ctx(), CONFIG, slow_answer))  # the loop's time: 0.1 s is ten quarter leases
    assert store.renewals >= 3


def test_a_call_over_within_a_quarter_lease_is_never_renewed() -> None:
    store = Renewals()
    middleware = budget({"scope": "global", "period": "day", "max_cost_usd": 1.0}, store=store, lease_s=0.4)

    async def call_then_wait() -> None:
        await middleware.handle(ctx(), CONFIG, ScriptedNext(answer()))
        await asyncio.sleep(0.25)  # on the loop's (virtual) time: the layer's timer ticks, and finds nothing running

    run_virtual(call_then_wait())
    assert store.renewals == 0


async def test_a_failed_renewal_is_logged_and_the_call_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    store = GuardedBudgets(Renewals(failing=True))
    middleware = budget({"scope": "global", "period": "day", "max_cost_usd": 1.0}, store=store, lease_s=0.04)
    assert (await middleware.handle(ctx(), CONFIG, slow_answer)).text == "ok"
    assert "could not renew reservation" in caplog.text


async def test_two_limits_on_one_bucket_hold_the_call_to_both_on_sqlite(tmp_path: Path) -> None:
    middleware = budget({"scope": "user", "period": "day", "max_cost_usd": 1.0},
                        {"scope": "user", "period": "day", "max_requests": 1},
                        store=SqliteBudgetStore(tmp_path / "b.db", synchronous="FULL"))
    await middleware.handle(ctx(user="ada"), CONFIG, ScriptedNext(answer(0.006)))
    with pytest.raises(BudgetExceededError) as refused:
        await middleware.handle(ctx(user="ada"), CONFIG, ScriptedNext(answer(0.006)))
    assert refused.value.dimension == "requests"
    [bucket] = await state(middleware)
    assert (bucket.spent.cost_micro_usd, bucket.spent.requests) == (6_000, 1)
    await middleware.store.aclose()
