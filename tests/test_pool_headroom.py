"""``headroom`` over deployments whose providers enforce requests a minute, in simulated minutes:
the pool keeps each under its limit, so no 429 is asked for, and the pool's throughput is the
sum of its limits (ADR 0051)."""

from __future__ import annotations

import asyncio
import random

from provmw.errors import PoolUnavailableError, RateLimitError
from provmw.manager import ServiceManager
from provmw.middleware.pool import PoolMiddleware
from provmw.plugins import PluginHost
from provmw.testing import FakeClock, FakeProvider, RequestLimit
from tests.test_pools import pooled

LIMITS = {"a": 100, "b": 200, "c": 700}  # requests a minute, enforced by the provider and told to the pool
MINUTES = 2


async def run(fake: FakeProvider, host: PluginHost, per_minute: int) -> tuple[list[object], dict[str, RequestLimit]]:
    """``per_minute`` chats a simulated minute for :data:`MINUTES` minutes, a second's calls at once;
    what each call gave, and each deployment's provider-side limit."""
    clock = FakeClock(0.0)
    limits = {m: fake.limit(rpm, model=f"dep-{m}", clock=clock) for m, rpm in LIMITS.items()}
    settings = pooled(fake, "headroom", members=tuple(LIMITS), rpm=LIMITS, middleware={"pool": {"enabled": False}})
    layer = PoolMiddleware(pools=settings.pools, configurations=settings.configurations, wall_clock=clock,
                           rng=random.Random(3))
    outcomes: list[object] = []
    async with ServiceManager(settings, host=host, middleware=[layer]) as manager:
        for _ in range(60 * MINUTES):
            calls = per_minute // 60
            outcomes += await asyncio.gather(*(manager.chat(f"q{len(outcomes) + i}") for i in range(calls)),
                                             return_exceptions=True)
            clock.advance(1.0)
    return outcomes, limits


def served(outcomes: list[object]) -> int:
    return sum(not isinstance(o, BaseException) for o in outcomes)


async def test_below_the_sum_of_limits_every_call_is_served_and_no_provider_refuses(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    outcomes, limits = await run(fake, builtin_only, per_minute=900)
    assert served(outcomes) == 900 * MINUTES
    assert {m: limit.refused for m, limit in limits.items()} == dict.fromkeys(LIMITS, 0)


async def test_over_the_sum_of_limits_the_pool_serves_at_least_95_percent_of_it_and_never_a_429(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    outcomes, limits = await run(fake, builtin_only, per_minute=1_200)
    assert served(outcomes) >= 0.95 * sum(LIMITS.values()) * MINUTES
    assert not [o for o in outcomes if isinstance(o, RateLimitError)]
    assert {m: limit.refused for m, limit in limits.items()} == dict.fromkeys(LIMITS, 0)
    assert all(isinstance(o, PoolUnavailableError) for o in outcomes if isinstance(o, BaseException))


async def test_a_burst_either_side_of_a_minute_boundary_stays_within_the_providers_minute(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    # Providers count a rolling minute; a pool that counts clock minutes sends 2 x rpm in two seconds.
    clock = FakeClock(59.0)
    limit = fake.limit(100, model="dep-a", clock=clock)
    settings = pooled(fake, "headroom", members=("a",), rpm={"a": 100}, middleware={"pool": {"enabled": False}})
    layer = PoolMiddleware(pools=settings.pools, configurations=settings.configurations, wall_clock=clock)
    async with ServiceManager(settings, host=builtin_only, middleware=[layer]) as manager:
        await asyncio.gather(*(manager.chat(f"x{i}") for i in range(100)))
        clock.advance(2.0)
        late = await asyncio.gather(*(manager.chat(f"y{i}") for i in range(100)), return_exceptions=True)
    assert limit.refused == 0
    assert not [o for o in late if isinstance(o, RateLimitError)]
