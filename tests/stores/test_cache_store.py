"""The in-memory cache store: bounds and expiry."""

from __future__ import annotations

import asyncio
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from provmw.stores.cache import MemoryCacheStore


async def test_a_hundred_thousand_keys_never_exceed_the_entry_bound() -> None:
    store = MemoryCacheStore(max_entries=1_000, max_bytes=10**9)
    high = 0
    for i in range(100_000):
        await store.set(f"k{i}", "v" * (i % 50), 60)
        if i % 1_000 == 0:
            high = max(high, store.entries)
    assert high <= 1_000 and store.entries == 1_000


async def test_a_hundred_thousand_keys_never_exceed_the_byte_bound() -> None:
    store = MemoryCacheStore(max_entries=10**9, max_bytes=200_000)
    high = 0
    for i in range(100_000):
        await store.set(f"k{i}", "x" * (i % 700), 60)
        high = max(high, store.bytes) if i % 997 == 0 else high
    assert high <= 200_000 and store.bytes <= 200_000


async def test_the_least_recently_used_entry_goes_first() -> None:
    store = MemoryCacheStore(max_entries=2)
    await store.set("a", "1", 60)
    await store.set("b", "2", 60)
    await store.get("a")
    await store.set("c", "3", 60)
    assert [await store.get(k) for k in "abc"] == ["1", None, "3"]


async def test_a_value_larger_than_the_whole_cache_is_not_stored() -> None:
    store = MemoryCacheStore(max_bytes=1_000)
    await store.set("small", "s", 60)
    await store.set("huge", "x" * 5_000, 60)
    assert (await store.get("huge"), await store.get("small")) == (None, "s")


@settings(max_examples=50)
@given(ttls=st.lists(st.floats(0.01, 100), min_size=1, max_size=30), reads=st.lists(st.floats(0, 120), max_size=30))
def test_an_expired_entry_is_never_served(ttls: list[float], reads: list[float]) -> None:
    now = [0.0]
    store = MemoryCacheStore(timer=lambda: now[0])

    async def check() -> None:
        for i, ttl in enumerate(ttls):
            await store.set(f"k{i}", str(ttl), ttl)
        for t in sorted(reads):
            now[0] = t
            for i, ttl in enumerate(ttls):
                assert (await store.get(f"k{i}") is not None) == (t < ttl)

    asyncio.run(check())


def test_the_store_is_safe_across_threads() -> None:
    store = MemoryCacheStore(max_entries=500)

    def hammer(offset: int) -> None:
        async def run() -> None:
            for i in range(5_000):
                await store.set(f"{offset}-{i}", "v" * 10, 60)
                await store.get(f"{offset}-{i // 2}")

        asyncio.run(run())

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.entries <= 500


def test_the_memory_store_says_it_grants_every_claim_unless_a_subclass_hands_claims_out() -> None:
    class Claiming(MemoryCacheStore):
        async def claim(self, key: str, ttl_s: float) -> str | None:
            return None

    assert MemoryCacheStore().grants_every_claim
    assert not Claiming().grants_every_claim


async def test_an_entry_with_no_time_left_is_not_kept() -> None:
    store = MemoryCacheStore()
    await store.set("k", "v", 0)
    assert await store.get("k") is None and store.entries == 0 and store.bytes == 0


async def test_expired_entries_make_room_before_live_ones_go() -> None:
    now = [0.0]
    store = MemoryCacheStore(max_entries=2, timer=lambda: now[0])
    await store.set("old", "1", 5)
    await store.set("live", "2", 60)
    now[0] = 10.0
    await store.set("new", "3", 60)
    assert [await store.get(k) for k in ("old", "live", "new")] == [None, "2", "3"]


@settings(max_examples=50)
@given(writes=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 3_000), st.floats(0.5, 50)), max_size=60),
       max_bytes=st.integers(200, 8_000), max_entries=st.integers(1, 10))
def test_the_bytes_counted_are_the_live_entries_bytes(writes: list[tuple[int, int, float]], max_bytes: int,
                                                       max_entries: int) -> None:
    now = [0.0]
    store = MemoryCacheStore(max_entries=max_entries, max_bytes=max_bytes, timer=lambda: now[0])

    async def check() -> None:
        for key, length, ttl in writes:
            await store.set(f"k{key}", "x" * length, ttl)
            now[0] += 1.0
            live = [v for k in range(21) if (v := await store.get(f"k{k}")) is not None]
            assert store.bytes == sum(len(v) + 128 for v in live) <= max_bytes
            assert store.entries == len(live) <= max_entries

    asyncio.run(check())
