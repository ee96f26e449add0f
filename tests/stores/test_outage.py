"""The outage rule: what a store that fails means for each concern."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from provmw.errors import BudgetUnavailableError
from provmw.stores.breakers import BreakerPolicy, BreakerState, MemoryBreakerStore
from provmw.stores.budgets import Amounts
from provmw.stores.cache import MemoryCacheStore
from provmw.stores.outage import GuardedBreakers, GuardedBudgets, GuardedCache, GuardedRateLimiter
from provmw.stores.rate_limits import MemoryRateLimiter, RateLimits


class Down:
    """Any store whose every method fails as an unreachable server's would."""

    def __getattr__(self, name: str) -> Any:
        async def fail(*args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("store down")

        return fail


POLICY = BreakerPolicy(window_size=2, min_calls=2, failure_rate=0.5, open_s=30, half_open_probes=1)


async def test_a_cache_that_fails_is_a_miss_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    cache = GuardedCache(Down())
    assert [await cache.get("k") for _ in range(3)] == [None, None, None]
    assert await cache.claim("k", 1.0) == ""  # nobody to wait for: go upstream
    assert caplog.text.count("cache: the store failed") == 1


async def test_a_cache_that_answers_again_says_so(caplog: pytest.LogCaptureFixture) -> None:
    cache = GuardedCache(Down())
    await cache.get("k")
    cache.store = MemoryCacheStore()
    assert await cache.get("k") is None and "cache: the store answers again" in caplog.text


async def test_a_budget_that_cannot_reserve_fails_closed_by_default() -> None:
    with pytest.raises(BudgetUnavailableError, match="store down.*fail_closed"):
        await GuardedBudgets(Down()).reserve("r", [], now=0.0, lease_s=1.0)


async def test_a_budget_failing_open_admits_uncounted() -> None:
    assert await GuardedBudgets(Down(), "fail_open").reserve("r", [], now=0.0, lease_s=1.0) is None


async def test_the_settle_of_a_call_let_through_uncounted_is_not_kept() -> None:
    budgets = GuardedBudgets(Down(), "fail_open")
    await budgets.reserve("r", [], now=0.0, lease_s=1.0)
    await budgets.settle("r", Amounts(1, 1, 1))
    assert len(budgets.kept) == 0


async def test_a_settle_that_fails_is_logged_and_kept_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    budgets = GuardedBudgets(Down())
    await budgets.settle("r", Amounts())
    assert "budget: the store failed" in caplog.text and len(budgets.kept) == 1


async def test_breakers_fall_back_to_this_processs_own_and_report_back_there() -> None:
    local = MemoryBreakerStore()
    breakers = GuardedBreakers(Down(), local)
    for _ in range(2):
        admission = await breakers.admit("k", POLICY, 0.0)
        assert admission.admitted and admission.generation < 0
        await breakers.record("k", admission, POLICY, failed=True, slow=False, now=0.0)
    assert local.state("k") is BreakerState.OPEN


async def test_rate_limits_fall_back_to_this_processs_own_and_release_there() -> None:
    local, limits = MemoryRateLimiter(), RateLimits(max_concurrency=1)
    limiter = GuardedRateLimiter(Down(), local)
    grant = await limiter.acquire("k", limits, 1, 0.0)
    assert grant.admitted and not (await local.acquire("k", limits, 1, 0.0)).admitted
    await limiter.release("k", limits, permit=grant.permit, reserved=1, used=1, now=0.0)
    assert (await local.acquire("k", limits, 1, 0.0)).admitted


async def turned(work: Awaitable[object]) -> bool:
    """Whether the loop ran a callback while ``work`` ran."""
    ran: list[bool] = []
    asyncio.get_running_loop().call_soon(ran.append, True)
    with contextlib.suppress(BudgetUnavailableError):
        await work
    return ran == [True]


@pytest.mark.parametrize("work", [
    lambda: GuardedCache(Down()).get("k"),
    lambda: GuardedBudgets(Down()).reserve("r", [], now=0.0, lease_s=1.0),
    lambda: GuardedBudgets(Down(), "fail_open").reserve("r", [], now=0.0, lease_s=1.0),
    lambda: GuardedBreakers(Down(), MemoryBreakerStore()).admit("k", POLICY, 0.0),
    lambda: GuardedRateLimiter(Down(), MemoryRateLimiter()).acquire("k", RateLimits(max_concurrency=1), 1, 0.0),
], ids=["cache", "budget-fail_closed", "budget-fail_open", "circuit_breaker", "rate_limit"])
async def test_a_call_that_finds_its_store_down_gives_the_loop_a_turn(work: Callable[[], Awaitable[object]]) -> None:
    # A caller retrying a refusal at once would otherwise keep the loop, and the store's way back, from running.
    assert await turned(work())
