"""The Redis budget store keeps the core stores' contract (the same tests run against it), and
its own promises: one hash slot, windows that expire, integers that stay exact."""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable

import pytest
import redis
from provmw_redis import RedisState
from provmw_redis.budgets import RedisBudgetStore
from redis.crc import key_slot

from provmw.stores.budgets import Amounts, BudgetStore, Charge, Limits
from provmw.testing import FakeClock
from tests.stores import test_budget_store as contract
from tests.stores.test_budget_skew import admitted
from tests.stores.test_budget_store import DAY, DOLLAR, MONTH, charge, held

pytestmark = pytest.mark.redis

# The core stores' tests that need nothing but a store (and its clock) run unchanged against this one.
CONTRACT = [test for name, test in vars(contract).items()
            if name.startswith("test_") and list(inspect.signature(test).parameters) in (["store"], ["store", "clock"])]


@pytest.mark.parametrize("case", CONTRACT, ids=lambda test: test.__name__.removeprefix("test_"))
async def test_the_core_budget_store_contract_holds(case: Callable[..., Awaitable[None]], store: BudgetStore,
                                                    clock: FakeClock) -> None:
    await case(store, clock) if "clock" in inspect.signature(case).parameters else await case(store)


@pytest.fixture
def clock() -> FakeClock:
    """The store's clock in these tests; by default it is the server's (TIME)."""
    return FakeClock(0.0)


@pytest.fixture
def store(state: RedisState, clock: FakeClock) -> BudgetStore:
    return RedisBudgetStore(state, clock=clock)


async def test_every_budget_key_shares_one_hash_slot(store: BudgetStore, prefix: str,
                                                     redis_sync: redis.Redis) -> None:
    await store.reserve("r1", [charge(1_000)], now=0, lease_s=60)
    keys = list(redis_sync.scan_iter(match=f"*{prefix}*"))
    assert len(keys) == 4  # the index, the bucket, its leases, the reservation
    assert len({key_slot(k) for k in keys}) == 1


async def test_a_window_bucket_expires_35_days_after_it_resets(store: BudgetStore, prefix: str,
                                                              redis_sync: redis.Redis) -> None:
    await store.reserve("r1", [charge(1_000)], now=0, lease_s=60)
    [bucket] = [k for k in redis_sync.scan_iter(match=f"*{prefix}*b:*")]
    resets_at_ms = 1_795_420_800_000  # DAY.resets_at, 2026-11-23T00:00-08:00
    assert redis_sync.pexpiretime(bucket) == resets_at_ms + 35 * 86_400_000


async def test_amounts_past_a_float_s_precision_stay_exact(store: BudgetStore) -> None:
    huge = Limits(cost_micro_usd=2**62)
    await store.reserve("r1", [Charge(DAY, huge, Amounts(2**53 + 1, 0, 1))], now=0, lease_s=60)
    await store.settle("r1", Amounts(2**53 + 1, 0, 1))
    assert await held(store) == (2**53 + 1, 0)


async def test_a_reservation_refused_in_one_handle_is_held_by_another(prefix: str) -> None:
    from conftest import state_settings

    first, second = RedisState(state_settings(prefix)), RedisState(state_settings(prefix))
    await first.budget_store().reserve("r1", [charge(900_000)], now=0, lease_s=60)
    assert await second.budget_store().reserve("r2", [charge(900_000, limits=DOLLAR)], now=0, lease_s=60) is not None
    await first.aclose()
    await second.aclose()


async def test_the_index_forgets_buckets_whose_time_is_past(store: BudgetStore, prefix: str, clock: FakeClock,
                                                            redis_sync: redis.Redis) -> None:
    await store.reserve("r1", [charge(1_000)], now=0, lease_s=60)
    clock.now = later = 1_795_420_800 + 36 * 86_400  # DAY reset, plus more than the 35 days it is kept
    await store.reserve("r2", [charge(1_000, MONTH)], now=later, lease_s=60)
    [index] = redis_sync.scan_iter(match=f"*{prefix}*buckets")
    assert redis_sync.zrange(index, 0, -1) == [MONTH.key.encode()]


@pytest.mark.parametrize("skew_s", [120.0, -120.0], ids=["ahead", "behind"])
async def test_a_skewed_process_sharing_redis_admits_no_more_than_the_limit(prefix: str, skew_s: float) -> None:
    from conftest import state_settings

    right, skewed = RedisState(state_settings(prefix)), RedisState(state_settings(prefix))
    now = time.time()
    # The one whose leases the other would take for expired reserves first.
    order = [(right, now), (skewed, now + skew_s)]
    total = sum([await admitted(state.budget_store(), f"p{i}-", at) for i, (state, at) in
                 enumerate(order if skew_s > 0 else order[::-1])])
    await right.aclose()
    await skewed.aclose()
    assert total == 20, f"{total} calls admitted under max_requests = 20"


async def test_a_renewed_lease_runs_from_the_server_s_clock(state: RedisState, prefix: str,
                                                           redis_sync: redis.Redis) -> None:
    store = state.budget_store()
    await store.reserve("r1", [charge(1_000)], now=0, lease_s=1)  # a caller whose clock says 1970
    await store.renew("r1", now=0, lease_s=1_000)
    [leases] = redis_sync.scan_iter(match=f"*{prefix}*l:*")
    expires_at = float(redis_sync.zrange(leases, 0, -1, withscores=True)[0][1])
    seconds, micros = redis_sync.time()
    now = seconds + micros / 1e6  # read after the renewal
    assert now + 990 < expires_at <= now + 1_000
