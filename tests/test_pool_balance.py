"""How a pool spreads traffic over real HTTP: equal deployments share it, a slow one is avoided
until it recovers (ADR 0051)."""

from __future__ import annotations

import asyncio
import collections
import random
from collections.abc import Sequence

import pytest

from provmw.manager import ServiceManager
from provmw.middleware.pool import PoolMiddleware
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeClock, FakeProvider, Fault
from tests.test_pools import pooled

FAST_S, SLOW_S = 0.01, 0.05  # the slow deployment takes five times as long
WARM_UP = 200  # calls before the latency averages are known


async def drive(manager: ServiceManager, calls: int, concurrency: int, start: int = 0) -> list[str]:
    """``calls`` chats made by ``concurrency`` workers; the deployment that served each, in call order."""
    served = [""] * calls
    numbers = iter(range(calls))

    async def worker() -> None:
        for i in numbers:
            served[i] = (await manager.chat(f"question {start + i}")).served_by

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return served


def share(served: Sequence[str], member: str) -> float:
    return collections.Counter(served)[member] / len(served)


def latency_pool(fake: FakeProvider, wall: FakeClock, explore: float = 0.05) -> tuple[Settings, PoolMiddleware]:
    """A ``latency`` pool whose layer reads ``wall`` as its wall clock (the built-in one is off)."""
    settings = pooled(fake, "latency", middleware={"pool": {"enabled": False}}, explore=explore)
    layer = PoolMiddleware(pools=settings.pools, configurations=settings.configurations, wall_clock=wall,
                           rng=random.Random(7))
    return settings, layer


def slow_down(fake: FakeProvider, slow_model: str | None) -> None:
    fake.clear_faults()
    fake.fail_randomly(1.0, Fault(delay_s=FAST_S))
    if slow_model is not None:
        fake.fail_randomly(1.0, Fault(delay_s=SLOW_S), model=slow_model)


@pytest.mark.slow
async def test_least_busy_keeps_each_of_four_under_thirty_percent_of_ten_thousand_calls(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(pooled(fake), host=builtin_only) as manager:
        served = await drive(manager, 10_000, 64)
    assert max(share(served, m) for m in "abcd") <= 0.30


@pytest.mark.slow
async def test_latency_sends_a_five_times_slower_deployment_under_ten_percent(fake: FakeProvider,
                                                                              builtin_only: PluginHost) -> None:
    slow_down(fake, "dep-d")
    settings, layer = latency_pool(fake, FakeClock(0.0))
    async with ServiceManager(settings, host=builtin_only, middleware=[layer]) as manager:
        served = await drive(manager, 1_200, 16)
    assert share(served[WARM_UP:], "d") < 0.10


@pytest.mark.slow
@pytest.mark.parametrize("explore", [0.05, 0.0])  # 0: only the stale average brings it back
async def test_latency_sends_traffic_again_to_a_recovered_deployment_within_a_minute(
        fake: FakeProvider, builtin_only: PluginHost, explore: float) -> None:
    slow_down(fake, "dep-d")
    wall = FakeClock(0.0)
    settings, layer = latency_pool(fake, wall, explore=explore)
    async with ServiceManager(settings, host=builtin_only, middleware=[layer]) as manager:
        await drive(manager, 600, 16)
        slow_down(fake, None)  # d recovers
        recovered_at = wall.now
        while "d" not in await drive(manager, 16, 16, start=1_000) and wall.now - recovered_at <= 60:
            wall.advance(1.0)  # 16 calls a simulated second
        back_after_s = wall.now - recovered_at
        after = await drive(manager, 400, 16, start=5_000)
    assert back_after_s <= 60
    assert share(after, "d") >= 0.10  # measured fast again, it takes its part


async def test_latency_measures_a_stale_deployment_with_one_call_not_with_every_call_in_flight(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    # "Not measured lately: measured first" must send one call to measure it, not every call that
    # starts before that one answers: a stale deployment may be the slow one, or a hung one.
    wall = FakeClock(0.0)
    settings, layer = latency_pool(fake, wall, explore=0.0)
    async with ServiceManager(settings, host=builtin_only, middleware=[layer]) as manager:
        await drive(manager, 40, 1)  # every deployment measured at 0 s
        wall.advance(30.0)
        for member in "abc":  # a, b and c measured again at 30 s; d not
            await manager.chat(f"again {member}", controls={"deployment": member})
        wall.advance(31.0)  # d's average is 61 s old: unknown again
        fake.fail_randomly(1.0, Fault(delay_s=SLOW_S), model="dep-d")  # and d is still slow
        served = await drive(manager, 16, 16, start=100)
    # One probe, then only what its measured latency earns against the others' (timing on a busy machine
    # may earn it a call or two more); the bug sent it all 16.
    assert collections.Counter(served)["d"] <= 4, served


async def test_least_busy_counts_a_stream_still_being_read_as_in_flight(fake: FakeProvider,
                                                                        builtin_only: PluginHost) -> None:
    settings = pooled(fake, members=("a", "b"), middleware={"pool": {"enabled": False}})
    layer = PoolMiddleware(pools=settings.pools, configurations=settings.configurations, rng=random.Random(0))
    async with ServiceManager(settings, host=builtin_only, middleware=[layer]) as manager:
        streams = [manager.stream_chat("tell me a long story", controls={"deployment": "a"}) for _ in range(3)]
        for stream in streams:
            await anext(stream)  # opened: the first chunk read, the rest not yet
        answers = [await manager.chat(f"q{i}") for i in range(10)]
        for stream in streams:
            await stream.aclose()
    assert {a.served_by for a in answers} == {"b"}  # a is busy with three streams
