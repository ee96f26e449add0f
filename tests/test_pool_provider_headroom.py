"""The pool reads what the providers' answers say of their rate limits (``x-ratelimit-*`` headers):
a deployment with no request left is left alone until its reset, so a pool that was told none of
its deployments' limits still asks no provider for a 429 (ADR 0051)."""

from __future__ import annotations

import random

import attrs

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.manager import ServiceManager
from provmw.middleware.pool import PoolMiddleware, exhausted_for
from provmw.pipeline import Middleware, Next, R
from provmw.plugins import PluginHost
from provmw.responses import RateLimitHint
from provmw.testing import FakeClock, FakeProvider, RequestLimit
from tests.test_pools import pooled

LIMITS = {"a": 40, "b": 80, "c": 160}  # requests a minute, enforced by the provider; the pool is not told
MINUTES = 3
PER_MINUTE = 240  # below the sum of the limits, above each one; a call every 0.25 s, exactly


class DropHints:
    """Below the pool: the answers reach it without their rate-limit hint, as before headers were read."""

    name = "drop_hints"
    priority = 440

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        return attrs.evolve(await next(config), rate_limit=None)


def pool_layer(fake: FakeProvider, clock: FakeClock, strategy: str, members: tuple[str, ...]) -> PoolMiddleware:
    settings = pooled(fake, strategy, members=members, middleware={"pool": {"enabled": False}})
    return PoolMiddleware(pools=settings.pools, configurations=settings.configurations, wall_clock=clock,
                          rng=random.Random(5))


async def run(fake: FakeProvider, host: PluginHost, *extra: Middleware) -> dict[str, RequestLimit]:
    """:data:`PER_MINUTE` chats a simulated minute, one after another, for :data:`MINUTES` minutes."""
    clock = FakeClock(0.0)
    limits = {m: fake.limit(rpm, model=f"dep-{m}", clock=clock) for m, rpm in LIMITS.items()}
    settings = pooled(fake, "weighted", members=tuple(LIMITS), middleware={"pool": {"enabled": False}})
    layer = pool_layer(fake, clock, "weighted", tuple(LIMITS))
    async with ServiceManager(settings, host=host, middleware=[layer, *extra]) as manager:
        for i in range(PER_MINUTE * MINUTES):
            await manager.chat(f"q{i}")
            clock.advance(60.0 / PER_MINUTE)
    return limits


async def test_a_deployment_whose_answer_says_no_request_is_left_is_not_chosen_until_the_reset(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    clock = FakeClock(0.0)
    limit = fake.limit(3, model="dep-a", clock=clock)
    settings = pooled(fake, "order", members=("a", "b"), middleware={"pool": {"enabled": False}})
    async with ServiceManager(settings, host=builtin_only,
                              middleware=[pool_layer(fake, clock, "order", ("a", "b"))]) as manager:
        before = [(await manager.chat(f"q{i}")).served_by for i in range(5)]
        clock.advance(59.0)
        still = (await manager.chat("not yet")).served_by
        clock.advance(1.0)
        after = (await manager.chat("reset")).served_by
    assert (before, still, after) == (["a", "a", "a", "b", "b"], "b", "a")
    assert limit.refused == 0


async def test_without_the_hints_the_same_run_is_answered_429s(fake: FakeProvider, builtin_only: PluginHost) -> None:
    limits = await run(fake, builtin_only, DropHints())
    assert sum(limit.refused for limit in limits.values()) > 0


async def test_with_the_hints_no_429_reaches_any_providers_limit(fake: FakeProvider,
                                                                builtin_only: PluginHost) -> None:
    limits = await run(fake, builtin_only)
    assert {m: limit.refused for m, limit in limits.items()} == dict.fromkeys(LIMITS, 0)
    assert sum(limit.admitted for limit in limits.values()) == PER_MINUTE * MINUTES


async def test_a_stream_whose_opening_says_no_request_is_left_cools_its_deployment_at_once(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    clock = FakeClock(0.0)
    limit = fake.limit(1, model="dep-a", clock=clock)
    settings = pooled(fake, "order", members=("a", "b"), middleware={"pool": {"enabled": False}})
    async with ServiceManager(settings, host=builtin_only,
                              middleware=[pool_layer(fake, clock, "order", ("a", "b"))]) as manager:
        stream = manager.stream_chat("tell me a story")
        first = await anext(stream)
        second = await manager.chat("meanwhile")
        await stream.aclose()
    assert (first.served_by, first.rate_limit, second.served_by) == ("a", RateLimitHint(
        remaining_requests=0, requests_reset_s=60.0), "b")
    assert limit.refused == 0


def test_fewer_tokens_left_than_the_call_needs_waits_for_the_tokens_reset() -> None:
    hint = RateLimitHint(remaining_requests=5, remaining_tokens=100, requests_reset_s=1.0, tokens_reset_s=7.5)
    assert (exhausted_for(hint, 101), exhausted_for(hint, 100)) == (7.5, None)


def test_no_request_left_without_a_reset_waits_a_second() -> None:
    assert exhausted_for(RateLimitHint(remaining_requests=0), 10) == 1.0


def test_both_exhausted_wait_for_the_later_reset() -> None:
    hint = RateLimitHint(remaining_requests=0, remaining_tokens=0, requests_reset_s=2.0, tokens_reset_s=30.0)
    assert exhausted_for(hint, 1) == 30.0
