"""Per-name state is bounded: a caller inventing names cannot grow it (issue #16, finding 10)."""

from __future__ import annotations

import copy
import pickle

import attrs

from provmw._base.bounded import KeepingLRU
from provmw.middleware.retry import RetryMiddleware
from provmw.pricing import PriceTable
from provmw.stores.breakers import BreakerPolicy, BreakerState, MemoryBreakerStore
from provmw.stores.rate_limits import MemoryRateLimiter, RateLimits

POLICY = BreakerPolicy(window_size=2, min_calls=1, open_s=30)


@attrs.define
class Slot:
    busy: bool = False


def test_a_full_map_forgets_the_least_recently_used_entry_it_need_not_keep() -> None:
    names: KeepingLRU[str, Slot] = KeepingLRU(3, keep=lambda slot: slot.busy)
    names["a"], names["b"], names["c"] = Slot(busy=True), Slot(), Slot()
    names["d"] = Slot()
    assert sorted(names) == ["a", "c", "d"]


def test_a_map_of_kept_entries_still_holds_its_bound() -> None:
    names: KeepingLRU[str, Slot] = KeepingLRU(3, keep=lambda slot: slot.busy)
    for name in "abcdef":
        names[name] = Slot(busy=True)
    assert sorted(names) == ["d", "e", "f"]


def full_of_abc() -> KeepingLRU[str, Slot]:
    names: KeepingLRU[str, Slot] = KeepingLRU(3)
    names["a"], names["b"], names["c"] = Slot(), Slot(), Slot()
    return names


def test_an_entry_read_with_used_is_the_last_to_go() -> None:
    names = full_of_abc()
    assert names.used("a") is not None
    names["d"] = Slot()
    assert list(names) == ["c", "a", "d"]


def test_an_entry_read_with_get_keeps_its_place() -> None:
    names = full_of_abc()
    assert names.get("a") is not None
    names["d"] = Slot()
    assert list(names) == ["b", "c", "d"]


def test_used_on_a_missing_name_adds_nothing() -> None:
    names: KeepingLRU[str, Slot] = KeepingLRU(3)
    assert names.used("nobody") is None
    assert len(names) == 0


async def open_breaker(store: MemoryBreakerStore, key: str) -> None:
    admission = await store.admit(key, POLICY, now=0.0)
    await store.record(key, admission, POLICY, failed=True, slow=False, now=0.0)


async def test_an_open_breaker_outlives_many_new_endpoints() -> None:
    store = MemoryBreakerStore(max_keys=8)
    await open_breaker(store, "failing")
    for n in range(100):
        await store.admit(f"endpoint-{n}", POLICY, now=1.0)
    assert store.state("failing") is BreakerState.OPEN
    assert len(store._breakers) == 8


async def test_a_rate_limit_with_a_call_in_flight_outlives_many_new_configurations() -> None:
    limiter, limits = MemoryRateLimiter(max_keys=8), RateLimits(max_concurrency=1)
    assert (await limiter.acquire("busy", limits, 1, now=0.0)).admitted
    for n in range(100):
        name = f"ad-hoc:openai/m{n}"
        await limiter.acquire(name, limits, 1, now=0.0)
        await limiter.release(name, limits, permit="", reserved=1, used=1, now=0.0)
    assert not (await limiter.acquire("busy", limits, 1, now=0.0)).admitted  # its slot is still counted
    assert len(limiter._states) == 8


def test_a_write_to_a_full_map_of_kept_entries_keeps_the_written_entry() -> None:
    names: KeepingLRU[str, Slot] = KeepingLRU(2, keep=lambda slot: slot.busy)
    names["a"], names["b"] = Slot(busy=True), Slot(busy=True)
    names["c"] = Slot()
    assert "c" in names
    assert len(names) == 2


def test_the_entry_just_written_is_the_most_recently_used() -> None:
    names: KeepingLRU[str, Slot] = KeepingLRU(3, keep=lambda slot: slot.busy)
    names["a"], names["b"], names["c"] = Slot(busy=True), Slot(), Slot()
    names["d"] = Slot()
    assert list(names)[-1] == "d"


async def test_a_new_configuration_keeps_its_concurrency_limit_when_every_tracked_one_is_busy() -> None:
    limiter, limits = MemoryRateLimiter(max_keys=2), RateLimits(max_concurrency=1)
    for busy in ("a", "b"):
        assert (await limiter.acquire(busy, limits, 1, now=0.0)).admitted
    assert (await limiter.acquire("c", limits, 1, now=0.0)).admitted
    assert not (await limiter.acquire("c", limits, 1, now=0.0)).admitted  # c's one slot is taken


async def test_a_new_endpoint_can_open_its_breaker_when_every_tracked_breaker_is_open() -> None:
    store = MemoryBreakerStore(max_keys=2)
    for key in ("a", "b", "c"):
        admission = await store.admit(key, POLICY, now=0.0)
        await store.record(key, admission, POLICY, failed=True, slow=False, now=0.0)
    assert store.state("c") is BreakerState.OPEN


def test_a_bounded_map_round_trips_through_pickle_with_its_bound() -> None:
    names: KeepingLRU[str, int] = KeepingLRU(2)
    names["a"] = 1
    restored = pickle.loads(pickle.dumps(names))
    assert (dict(restored), restored.maxsize) == ({"a": 1}, 2)


def test_a_price_table_can_be_deep_copied() -> None:
    table = PriceTable({})
    assert copy.deepcopy(table)._prices == {}


def test_a_retry_layer_can_be_deep_copied() -> None:
    layer = RetryMiddleware()
    layer.budget("openai:gpt")
    assert list(copy.deepcopy(layer).budgets) == ["openai:gpt"]


def test_a_bounded_map_copies_with_its_bound() -> None:
    names: KeepingLRU[str, int] = KeepingLRU(2)
    names["a"] = 1
    copied = names.copy()
    copied["b"], copied["c"] = 2, 3
    assert (list(copied), list(names)) == (["b", "c"], ["a"])
