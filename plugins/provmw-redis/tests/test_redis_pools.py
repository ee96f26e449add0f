"""Pool state (ADR 0051): one contract, served in memory and by Redis; what only Redis adds (calls
in flight as leases, one view across handles, keys that expire). How Redis writes starts and ends
behind the call: ``test_redis_pool_writes.py``."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator, Sequence

import pytest
import redis
from provmw_redis import RedisState
from provmw_redis.pools import RedisPoolState
from test_redis_processes import manager, pooled

from provmw.stores.outage import GuardedPoolState
from provmw.stores.pools import LATENCY_ALPHA, LATENCY_STALE_S, Load, MemoryPoolState, PoolState, PoolView
from provmw.testing import FakeProvider, Fault

from conftest import state_settings

T = 1_800_000_000.0  # a minute's first second, wall-clock time
MEMBERS = ("a", "b")


async def start(pools: PoolState, member: str = "a", *, pool: str = "p", key: str | None = None, tokens: int = 0,
                now: float = T, key_ttl_s: float = 60.0) -> None:
    await pools.started(pool, member, key=key, tokens=tokens, now=now, key_ttl_s=key_ttl_s)


async def end(pools: PoolState, member: str = "a", *, now: float = T, latency_s: float | None = None,
              cooldown_until: float | None = None) -> None:
    await pools.ended("p", member, now=now, latency_s=latency_s, cooldown_until=cooldown_until)


async def load(pools: PoolState, member: str = "a", *, now: float = T, pool: str = "p") -> Load:
    return (await pools.read(pool, MEMBERS, None, now)).loads[member]


async def affine(pools: PoolState, key: str = "k", *, now: float = T, pool: str = "p") -> str | None:
    return (await pools.read(pool, MEMBERS, key, now)).affine


class PoolStateContract:
    """What every ``PoolState`` does, whoever serves it; times are injected (``now``)."""

    @pytest.fixture
    def pools(self) -> PoolState:
        """The state under test, fresh for each test: each subclass serves its own."""
        raise NotImplementedError

    async def test_a_member_never_seen_has_no_load(self, pools: PoolState) -> None:
        view = await pools.read("p", MEMBERS, "k", T)
        assert dict(view.loads) == {"a": Load(), "b": Load()} and view.affine is None

    async def test_a_started_call_is_in_flight(self, pools: PoolState) -> None:
        await start(pools)
        await start(pools)
        assert (await load(pools)).in_flight == 2 and (await load(pools, "b")).in_flight == 0

    async def test_an_ended_call_is_no_longer_in_flight(self, pools: PoolState) -> None:
        await start(pools)
        await end(pools)
        assert (await load(pools)).in_flight == 0

    async def test_an_end_without_a_start_leaves_nothing_below_zero(self, pools: PoolState) -> None:
        await end(pools)
        await start(pools)
        assert (await load(pools)).in_flight == 1

    async def test_starts_count_requests_and_tokens_this_minute(self, pools: PoolState) -> None:
        await start(pools, tokens=10)
        await start(pools, tokens=20, now=T + 59)
        used = await load(pools, now=T + 59)
        assert (used.requests, used.tokens) == (2, 30)

    async def test_a_start_counts_for_a_rolling_minute_across_a_clock_minutes_turn(self, pools: PoolState) -> None:
        await start(pools, tokens=10, now=T + 59)
        used = await load(pools, now=T + 118)
        assert (used.requests, used.tokens) == (1, 10)

    async def test_a_start_leaves_the_counts_a_minute_after_it(self, pools: PoolState) -> None:
        await start(pools, tokens=10, now=T + 59)
        used = await load(pools, now=T + 119)
        assert (used.requests, used.tokens) == (0, 0)

    async def test_the_first_latency_is_the_average(self, pools: PoolState) -> None:
        await end(pools, latency_s=2.5)
        assert (await load(pools)).latency_s == 2.5

    async def test_a_new_latency_weighs_latency_alpha(self, pools: PoolState) -> None:
        await end(pools, latency_s=2.0)
        await end(pools, latency_s=1.0, now=T + 1)
        average = LATENCY_ALPHA * 1.0 + (1 - LATENCY_ALPHA) * 2.0
        assert (await load(pools, now=T + 1)).latency_s == pytest.approx(average)

    async def test_a_latency_not_measured_for_a_while_is_unknown(self, pools: PoolState) -> None:
        await end(pools, latency_s=2.0)
        assert (await load(pools, now=T + LATENCY_STALE_S)).latency_s is None

    async def test_a_latency_after_a_stale_average_starts_afresh(self, pools: PoolState) -> None:
        await end(pools, latency_s=2.0)
        await end(pools, latency_s=1.0, now=T + LATENCY_STALE_S)
        assert (await load(pools, now=T + LATENCY_STALE_S)).latency_s == 1.0

    async def test_an_end_without_a_latency_keeps_the_average(self, pools: PoolState) -> None:
        await end(pools, latency_s=2.0)
        await end(pools, now=T + 1)
        assert (await load(pools, now=T + 1)).latency_s == 2.0

    async def test_a_cool_down_is_read_back(self, pools: PoolState) -> None:
        await end(pools, cooldown_until=T + 30)
        assert (await load(pools)).cooldown_until == T + 30

    async def test_a_shorter_cool_down_never_shortens_a_longer_one(self, pools: PoolState) -> None:
        await end(pools, cooldown_until=T + 30)
        await end(pools, cooldown_until=T + 10)
        assert (await load(pools)).cooldown_until == T + 30

    async def test_a_key_is_kept_with_the_member_it_last_started_on(self, pools: PoolState) -> None:
        await start(pools, "a", key="k")
        await start(pools, "b", key="k", now=T + 1)
        assert await affine(pools, now=T + 1) == "b"

    async def test_a_key_is_forgotten_after_its_ttl(self, pools: PoolState) -> None:
        await start(pools, key="k", key_ttl_s=10)
        assert await affine(pools, now=T + 9.5) == "a"
        assert await affine(pools, now=T + 10) is None

    async def test_each_start_keeps_the_key_for_its_ttl_again(self, pools: PoolState) -> None:
        await start(pools, key="k", key_ttl_s=10)
        await start(pools, key="k", key_ttl_s=10, now=T + 8)
        assert await affine(pools, now=T + 15) == "a"

    async def test_pools_do_not_share_members_or_keys(self, pools: PoolState) -> None:
        await start(pools, pool="p", key="k")
        assert await load(pools, pool="q") == Load() and await affine(pools, pool="q") is None


class TestMemoryPoolState(PoolStateContract):
    @pytest.fixture
    async def pools(self) -> AsyncIterator[PoolState]:
        state = MemoryPoolState()
        yield state
        await state.aclose()


class Flushed:
    """A ``RedisPoolState`` whose reads first wait for its writes: the contract's steps follow one another."""

    def __init__(self, pools: RedisPoolState) -> None:
        self.pools = pools

    async def read(self, pool: str, members: Sequence[str], key: str | None, now: float) -> PoolView:
        await self.pools.flush()
        return await self.pools.read(pool, members, key, now)

    async def started(self, pool: str, member: str, *, key: str | None, tokens: int, now: float,
                      key_ttl_s: float) -> None:
        await self.pools.started(pool, member, key=key, tokens=tokens, now=now, key_ttl_s=key_ttl_s)

    async def ended(self, pool: str, member: str, *, now: float, latency_s: float | None,
                    cooldown_until: float | None) -> None:
        await self.pools.ended(pool, member, now=now, latency_s=latency_s, cooldown_until=cooldown_until)

    async def aclose(self) -> None:
        await self.pools.aclose()


@pytest.mark.redis
class TestRedisPoolState(PoolStateContract):
    @pytest.fixture
    async def pools(self, state: RedisState) -> AsyncIterator[PoolState]:
        pools = Flushed(state.pool_state())
        yield pools
        await pools.aclose()


@pytest.fixture
async def other(prefix: str) -> AsyncIterator[RedisState]:
    """A second handle on the same Redis and prefix: another process, in effect."""
    backend = RedisState(state_settings(prefix))
    yield backend
    await backend.aclose()


@pytest.mark.redis
async def test_one_handles_calls_are_in_flight_for_another(state: RedisState, other: RedisState) -> None:
    pools = state.pool_state()
    await start(pools)
    await pools.flush()
    assert (await load(other.pool_state())).in_flight == 1


@pytest.mark.redis
async def test_latency_cool_downs_and_keys_are_seen_by_another_handle(state: RedisState, other: RedisState) -> None:
    pools = state.pool_state()
    await start(pools, key="k")
    await end(pools, latency_s=2.0, cooldown_until=T + 30)
    await pools.flush()
    view = await other.pool_state().read("p", MEMBERS, "k", T)
    assert (view.loads["a"].latency_s, view.loads["a"].cooldown_until, view.affine) == (2.0, T + 30, "a")


@pytest.mark.redis
async def test_a_call_of_a_dead_process_stops_counting_after_its_lease(prefix: str, other: RedisState) -> None:
    dead = RedisState(state_settings(prefix, slot_lease_s=30))
    pools = dead.pool_state()
    await start(pools)  # never ended: its process is gone
    await pools.flush()
    await dead.aclose()
    assert (await load(other.pool_state(), now=T + 29)).in_flight == 1
    assert (await load(other.pool_state(), now=T + 30)).in_flight == 0


@pytest.mark.redis
async def test_every_key_written_expires(state: RedisState, prefix: str, redis_sync: redis.Redis) -> None:
    pools = state.pool_state()
    await start(pools, "a", key="k", tokens=5)
    await end(pools, "b", latency_s=1.0, cooldown_until=T + 30)
    await pools.flush()
    keys = list(redis_sync.scan_iter(match=f"{prefix}:pool:*"))
    assert len(keys) == 5  # in flight, use, affinity, the member's state, the last write landed
    assert all(redis_sync.pttl(k) > 0 for k in keys)


@pytest.mark.redis
async def test_a_redis_url_shares_the_pools_behind_the_outage_guard(fake: FakeProvider, prefix: str) -> None:
    async with manager(pooled(fake, prefix)) as m:
        pools = m.state.pool_state()
    assert isinstance(pools, GuardedPoolState) and isinstance(pools.shared, RedisPoolState)
    assert isinstance(pools.local, MemoryPoolState)


@pytest.mark.redis
async def test_pools_left_out_of_shared_stay_in_this_process(fake: FakeProvider, prefix: str) -> None:
    settings = pooled(fake, prefix)
    settings["state"]["shared"] = ["budget", "rate_limit"]
    async with manager(settings) as m:
        assert isinstance(m.state.pool_state(), MemoryPoolState)


@pytest.mark.redis
async def test_a_burst_of_calls_in_one_process_spreads_over_the_deployments(fake: FakeProvider, prefix: str,
                                                                          other: RedisState) -> None:
    # d is the least busy as the burst reads, and stays so in Redis until the burst's starts land:
    # each call must count the starts this process sent meanwhile, or all forty would take d.
    pools = other.pool_state()
    for member in "abc":
        await start(pools, member, pool="gpt", now=time.time())
    await pools.flush()
    fake.fail_randomly(1.0, Fault(delay_s=0.05))
    async with manager(pooled(fake, prefix)) as m:
        await asyncio.gather(*(m.chat(f"q{i}") for i in range(40)))
    assert max(collections.Counter(r.model for r in fake.received).values()) <= 15
