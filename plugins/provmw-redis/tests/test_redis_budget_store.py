"""The Redis budget store keeps the core stores' contract (the same tests run against it), and
its own promises: one hash slot, windows that expire, integers that stay exact."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

import pytest
import redis
from provmw_redis import RedisState
from redis.crc import key_slot

from provmw.stores.budgets import Amounts, BudgetStore, Charge, Limits
from tests.stores import test_budget_store as contract
from tests.stores.test_budget_store import DAY, DOLLAR, MONTH, charge, held

pytestmark = pytest.mark.redis

# The core stores' tests that need nothing but a store run unchanged against this one.
CONTRACT = [test for name, test in vars(contract).items()
            if name.startswith("test_") and list(inspect.signature(test).parameters) == ["store"]]


@pytest.mark.parametrize("case", CONTRACT, ids=lambda test: test.__name__.removeprefix("test_"))
async def test_the_core_budget_store_contract_holds(case: Callable[[BudgetStore], Awaitable[None]],
                                                    store: BudgetStore) -> None:
    await case(store)


@pytest.fixture
def store(state: RedisState) -> BudgetStore:
    return state.budget_store()


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


async def test_the_index_forgets_buckets_whose_time_is_past(store: BudgetStore, prefix: str,
                                                            redis_sync: redis.Redis) -> None:
    await store.reserve("r1", [charge(1_000)], now=0, lease_s=60)
    later = 1_795_420_800 + 36 * 86_400  # DAY reset, plus more than the 35 days it is kept
    await store.reserve("r2", [charge(1_000, MONTH)], now=later, lease_s=60)
    [index] = redis_sync.scan_iter(match=f"*{prefix}*buckets")
    assert redis_sync.zrange(index, 0, -1) == [MONTH.key.encode()]
