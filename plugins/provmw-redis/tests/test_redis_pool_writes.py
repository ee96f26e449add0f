"""How the Redis pool state writes starts and ends: behind the call, in order, one pipeline at a
time; a call waits for its read alone, and what a read has not seen yet of this process's own
writes it counts itself, once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis
from own_server import OwnServer
from provmw_redis import RedisState
from provmw_redis.pools import RedisPoolState
from test_redis_failure import NOWHERE
from test_redis_pools import end, load, start
from test_redis_processes import manager, pooled

from provmw.stores.outage import GuardedPoolState
from provmw.stores.shared import StateSettings
from provmw.testing import FakeProvider

pytestmark = pytest.mark.redis


def hold_writes(state: RedisState) -> asyncio.Event:
    """Pipelines (the writer's) wait for the returned event before they are sent; reads do not."""
    held, make = asyncio.Event(), state.client.pipeline

    def gated(*args: Any, **options: Any) -> Any:
        pipe = make(*args, **options)
        execute = pipe.execute

        async def later(*args: Any, **options: Any) -> Any:
            await held.wait()
            return await execute(*args, **options)

        pipe.execute = later  # type: ignore[method-assign]
        return pipe

    state.client.pipeline = gated  # type: ignore[method-assign]
    return held


def in_flight(redis_sync: redis.Redis, prefix: str, member: str = "a") -> int:
    """What Redis itself holds, without this process's own count of what is on its way."""
    return int(redis_sync.zcard(f"{prefix}:pool:{{p}}:f:{member}"))


@pytest.fixture
async def pools(state: RedisState) -> AsyncIterator[RedisPoolState]:
    pools = state.pool_state()
    yield pools
    await pools.aclose()


async def test_a_call_on_a_pool_waits_for_one_script_and_not_for_its_writes(fake: FakeProvider,
                                                                            prefix: str) -> None:
    settings = pooled(fake, prefix)
    settings["state"]["shared"] = ["pool"]
    async with manager(settings) as m:
        await m.chat("warm-up")  # the scripts are loaded once (NOSCRIPT, then SCRIPT LOAD)
        shared, pools = m.state.shared, m.state.pool_state()
        assert isinstance(shared, RedisState) and isinstance(pools, GuardedPoolState)
        assert isinstance(pools.shared, RedisPoolState)
        await pools.shared.flush()
        sent: list[object] = []
        send: Callable[..., Awaitable[Any]] = shared.client.execute_command

        async def counted(*args: Any, **options: Any) -> Any:
            sent.append(args[0])
            return await send(*args, **options)

        shared.client.execute_command = counted  # type: ignore[method-assign]
        held = hold_writes(shared)
        await m.chat("hello")  # returns while its start and end are held back
        assert sent == ["EVALSHA"]
        held.set()


async def test_a_start_and_its_end_at_once_land_in_that_order(pools: RedisPoolState, prefix: str,
                                                              redis_sync: redis.Redis) -> None:
    for member in ["a", "b"] * 25:
        await start(pools, member)
        await end(pools, member)
    await pools.flush()
    assert (in_flight(redis_sync, prefix, "a"), in_flight(redis_sync, prefix, "b")) == (0, 0)
    assert int(redis_sync.zcard(f"{prefix}:pool:{{p}}:u:a")) == 25  # every start landed, before its end


async def test_a_read_counts_its_own_starts_still_on_their_way(state: RedisState, pools: RedisPoolState,
                                                             prefix: str, redis_sync: redis.Redis) -> None:
    held = hold_writes(state)
    await start(pools)
    await start(pools)
    await end(pools)
    assert (await load(pools)).in_flight == 1 and in_flight(redis_sync, prefix) == 0
    held.set()


async def test_a_read_counts_its_own_starts_on_their_way_in_the_minutes_use(
        state: RedisState, pools: RedisPoolState, prefix: str, redis_sync: redis.Redis) -> None:
    held = hold_writes(state)
    await start(pools, tokens=10)
    await start(pools, tokens=5)
    await end(pools)  # an end takes nothing from the minute's use
    used = await load(pools)
    assert (used.requests, used.tokens) == (2, 15) and redis_sync.zcard(f"{prefix}:pool:{{p}}:u:a") == 0
    held.set()


async def test_a_read_counts_its_own_landed_starts_once(state: RedisState, pools: RedisPoolState, prefix: str,
                                                       redis_sync: redis.Redis) -> None:
    await start(pools)
    await start(pools)
    await pools.flush()
    held = hold_writes(state)
    await start(pools)  # on its way: counted by this process alone
    assert (await load(pools)).in_flight == 3 and in_flight(redis_sync, prefix) == 2
    held.set()


async def test_aclose_writes_the_starts_and_ends_on_their_way(pools: RedisPoolState, prefix: str,
                                                              redis_sync: redis.Redis) -> None:
    await start(pools)
    await start(pools)
    await end(pools)
    await pools.aclose()
    assert in_flight(redis_sync, prefix) == 1


async def test_writes_after_the_server_forgot_its_scripts_load_them_again(own: OwnServer) -> None:
    backend = RedisState(StateSettings(own.url, options={"key_prefix": "reloaded"}))
    pools = backend.pool_state()
    await start(pools)
    await pools.flush()
    admin = redis.Redis.from_url(own.url)
    admin.script_flush()  # as a restart does
    await end(pools)
    await pools.aclose()
    await backend.aclose()
    assert admin.zcard("reloaded:pool:{p}:f:a") == 0  # the end landed, after its start
    admin.close()


async def test_writes_lost_to_an_unreachable_redis_never_raise(caplog: pytest.LogCaptureFixture) -> None:
    backend = RedisState(StateSettings(NOWHERE, options={"key_prefix": "unreachable"}))
    pools = backend.pool_state()
    with caplog.at_level(logging.WARNING):
        await start(pools)
        await end(pools, latency_s=1.0)
        await pools.aclose()
    await backend.aclose()
    warned = [r.getMessage().split(" (")[0] for r in caplog.records if r.name.startswith("provmw")]
    assert warned == ["redis state unreachable"]  # the outage, once; nothing raised


async def test_a_pool_outage_is_logged_once_however_many_calls_start_and_end(
        fake: FakeProvider, caplog: pytest.LogCaptureFixture) -> None:
    settings = pooled(fake, "pool-writes-outage")
    settings["state"]["url"] = NOWHERE
    async with manager(settings) as m:
        with caplog.at_level(logging.WARNING):
            for _ in range(5):
                await m.chat("hello")
    pool = [r.getMessage().split(" (")[0] for r in caplog.records if r.getMessage().startswith("pool:")]
    assert pool == ["pool: the store failed"]  # a start refused while Redis is down never reads as it answering


async def test_an_outage_in_the_writes_leaves_calls_answered(fake: FakeProvider) -> None:
    settings = pooled(fake, "pool-writes-outage")
    settings["state"]["url"] = NOWHERE
    async with manager(settings) as m:
        pools = m.state.pool_state()
        answers = await asyncio.gather(*(m.chat("hello") for _ in range(10)))
        assert isinstance(pools, GuardedPoolState) and isinstance(pools.shared, RedisPoolState)
        await pools.shared.flush()
    assert len(answers) == 10
