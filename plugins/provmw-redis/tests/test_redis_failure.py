"""When Redis is unreachable or paused: budgets fail closed before any request (or open, if asked),
the cache misses, breakers, rate limits and pools go by this process, and the outage is logged once."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from own_server import OwnServer
from test_redis_processes import document, manager, pooled

from provmw.errors import BudgetUnavailableError, CircuitOpenError, LocalRateLimitError
from provmw.responses import CompletionResponse
from provmw.testing import FakeProvider, Fault

NOWHERE = "redis://127.0.0.1:1/0"  # nothing listens there: refused at once
BUDGET = {"limits": [{"scope": "global", "period": "day", "max_cost_usd": 5.0}]}


def unreachable(fake: FakeProvider, **middleware: dict[str, Any]) -> dict[str, Any]:
    settings = document(fake, "unreachable", **middleware)
    settings["state"]["url"] = NOWHERE
    return settings


@pytest.fixture
def paused(redis_sync: redis.Redis) -> Iterator[None]:
    """Every client of the server waits (at most 3 s) until the test ends."""
    redis_sync.client_pause(3000, all=True)
    yield
    redis_sync.client_unpause()


@pytest.mark.redis
@pytest.mark.usefixtures("paused")
async def test_budgeted_calls_are_refused_before_any_request_while_redis_is_paused(
        fake: FakeProvider, prefix: str) -> None:
    async with manager(document(fake, prefix, budget=BUDGET)) as m:
        outcomes = await asyncio.gather(*(m.chat("hello") for _ in range(20)), return_exceptions=True)
    assert all(isinstance(o, BudgetUnavailableError) for o in outcomes)
    assert fake.count() == 0


@pytest.mark.redis
async def test_budgets_count_again_once_redis_is_back(fake: FakeProvider, prefix: str,
                                                      redis_sync: redis.Redis) -> None:
    settings = document(fake, prefix, budget=BUDGET)
    settings["state"]["retry_s"] = 0.0
    async with manager(settings) as m:
        redis_sync.client_pause(3000, all=True)
        try:
            with pytest.raises(BudgetUnavailableError):
                await m.chat("hello")
        finally:
            redis_sync.client_unpause()
        assert isinstance(await m.chat("hello"), CompletionResponse)
        [bucket] = await m.state.budget_store().states(now=0)
    assert bucket.spent.requests == 1


async def test_fail_open_budgets_let_calls_through_uncounted(fake: FakeProvider) -> None:
    async with manager(unreachable(fake, budget={**BUDGET, "failure_policy": "fail_open"})) as m:
        for _ in range(3):
            assert isinstance(await m.chat("hello"), CompletionResponse)
    assert fake.count() == 3


async def test_an_unreachable_cache_is_a_miss(fake: FakeProvider) -> None:
    async with manager(unreachable(fake, cache={"operations": ["embedding"]})) as m:
        first, second = await m.embed("words"), await m.embed("words")
    assert not first.cached and not second.cached
    assert fake.count() == 2


async def test_breakers_go_by_this_process_while_redis_is_down(fake: FakeProvider) -> None:
    fake.fail_randomly(1.0, Fault(status=503))
    breaker = {"window_size": 2, "min_calls": 2, "open_s": 60.0}
    async with manager(unreachable(fake, circuit_breaker=breaker)) as m:
        for _ in range(2):
            with pytest.raises(Exception, match="503"):
                await m.chat("hello")
        with pytest.raises(CircuitOpenError):
            await m.chat("hello")
    assert fake.count() == 2


async def test_rate_limits_go_by_this_process_while_redis_is_down(fake: FakeProvider) -> None:
    limits = {"max_wait_s": 0.0, "limits": {"main": {"requests_per_minute": 1}}}
    async with manager(unreachable(fake, rate_limit=limits)) as m:
        await m.chat("hello")
        with pytest.raises(LocalRateLimitError):
            await m.chat("hello")
    assert fake.count() == 1


async def test_an_outage_is_logged_once(fake: FakeProvider, caplog: pytest.LogCaptureFixture) -> None:
    settings = unreachable(fake, cache={"operations": ["embedding"]}, budget={**BUDGET, "failure_policy": "fail_open"})
    settings["state"]["retry_s"] = 0.0  # every call tries Redis again, and fails again
    async with manager(settings) as m:
        for _ in range(5):
            await m.embed("words")
            await m.chat("hello")
    warned = [r.getMessage().split(":")[0] for r in caplog.records if r.levelname == "WARNING"]
    # One for the outage, and one from each concern's outage rule, not one per call.
    assert sorted(warned) == ["budget", "cache", "circuit_breaker", "redis state unreachable (ConnectionError"]


async def test_a_pool_chooses_on_this_processs_view_once_redis_is_killed(fake: FakeProvider, own: OwnServer) -> None:
    fake.script(Fault(status=429, headers={"retry-after": "30"}), model="dep-a")
    settings = pooled(fake, "pool-outage", "order")
    settings["state"]["url"] = own.url
    async with manager(settings) as m:
        first = await m.chat("hello")  # a answers 429 and cools down, in Redis and in this process's view: b serves
        assert first.served_by == "b"
        assert (await m.state.pool_state().read("gpt", ["a"], None, time.time())).loads["a"].cooldown_until > 0
        own.kill()
        answers = await asyncio.gather(*(m.chat("hello") for _ in range(10)))
    assert {a.served_by for a in answers} == {"b"}  # this process still knows a is cooling down


async def test_pool_calls_are_served_while_redis_is_down(fake: FakeProvider) -> None:
    settings = pooled(fake, "pool-outage")
    settings["state"]["url"] = NOWHERE
    async with manager(settings) as m:
        answers = await asyncio.gather(*(m.chat("hello") for _ in range(40)))
    served = collections.Counter(a.served_by for a in answers)
    assert sum(served.values()) == 40 and max(served.values()) <= 20  # least_busy still spreads them


@pytest.mark.redis
@pytest.mark.usefixtures("paused")
async def test_pool_calls_are_served_while_redis_is_silent(fake: FakeProvider, prefix: str) -> None:
    async with manager(pooled(fake, prefix)) as m:  # Redis accepts the connection and answers nothing
        answers = await asyncio.gather(*(m.chat("hello") for _ in range(20)))
    assert len(answers) == 20 and fake.count() == 20


async def test_after_a_restart_no_connection_that_died_with_the_server_fails_a_call(own: OwnServer) -> None:
    from provmw_redis.backend import Health, RedisState

    from provmw.stores.shared import StateSettings

    now = [0.0]
    state = RedisState(StateSettings.from_table({"url": own.url}, "<test>"))
    state.health = Health(1.0, clock=lambda: now[0])
    await asyncio.gather(*(state.run(state.client.ping) for _ in range(8)))  # eight connections, idle now
    own.kill()
    with pytest.raises(Exception, match="unreachable"):
        await state.run(state.client.ping)
    own.start()  # the same port
    now[0] += 2.0  # past retry_s: the next call is the probe
    probe = await state.run(state.client.ping)  # would fail on a connection that died: "closed by server"
    outcomes = await asyncio.gather(*(state.run(state.client.ping) for _ in range(8)), return_exceptions=True)
    await state.aclose()
    assert probe is True and outcomes == [True] * 8
