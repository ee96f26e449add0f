"""KeyCache: a store's answers kept a short while, so a change reaches a server without a restart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from provmw.gateway import KeyCache, KeyRecord, SqliteKeyStore
from provmw.middleware.budget import BudgetLimit


class CountingStore(SqliteKeyStore):
    """The real store, counting the reads the cache makes of it."""

    verifies = 0
    budget_reads = 0

    async def verify(self, presented: str) -> KeyRecord | None:
        self.verifies += 1
        return await super().verify(presented)

    async def budgets_for(self, record: KeyRecord) -> tuple[BudgetLimit, ...]:
        self.budget_reads += 1
        return await super().budgets_for(record)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[CountingStore]:
    keys = CountingStore(tmp_path / "keys.sqlite3")
    yield keys
    await keys.aclose()


async def test_a_key_is_read_once_within_the_ttl(store: CountingStore) -> None:
    whole, record = await store.create("acme")
    cache = KeyCache(store, clock=Clock())
    assert [await cache.verify(whole) for _ in range(3)] == [record] * 3
    assert store.verifies == 1


async def test_a_key_disabled_is_refused_once_the_ttl_has_passed(store: CountingStore) -> None:
    whole, record = await store.create("acme")
    clock = Clock()
    cache = KeyCache(store, ttl_s=2.0, clock=clock)
    await cache.verify(whole)
    await store.disable(record.key_id)
    clock.now += 2.0
    verified = await cache.verify(whole)
    assert verified is not None
    assert verified.disabled


async def test_a_budget_set_reaches_the_principal_once_the_ttl_has_passed(store: CountingStore) -> None:
    _, record = await store.create("acme", team="search")
    clock = Clock()
    cache = KeyCache(store, clock=clock)
    assert (await cache.principal(record)).budgets == ()
    await store.set_budget("team", "acme/search", "day", max_requests=3)
    assert (await cache.principal(record)).budgets == ()  # within the TTL: as it was
    clock.now += 2.0
    assert [b.max_requests for b in (await cache.principal(record)).budgets] == [3]
    assert store.budget_reads == 2


async def test_concurrent_requests_with_one_key_share_one_read(store: CountingStore) -> None:
    whole, record = await store.create("acme")
    cache = KeyCache(store, clock=Clock())
    assert await asyncio.gather(*(cache.verify(whole) for _ in range(10))) == [record] * 10
    assert store.verifies == 1


async def test_a_malformed_key_is_never_looked_up(store: CountingStore) -> None:
    cache = KeyCache(store, clock=Clock())
    assert await cache.verify("Bearer sk-not-a-virtual-key") is None
    assert store.verifies == 0


async def test_the_cache_keeps_at_most_max_entries(store: CountingStore) -> None:
    keys = [(await store.create("acme"))[0] for _ in range(3)]
    cache = KeyCache(store, max_entries=2, clock=Clock())
    for whole in [*keys, keys[0]]:
        await cache.verify(whole)
    assert store.verifies == 4  # the first key went when the third came


async def test_a_flood_of_unknown_keys_does_not_push_a_known_one_out(store: CountingStore) -> None:
    whole, record = await store.create("acme")
    cache = KeyCache(store, max_entries=2, clock=Clock())
    await cache.verify(whole)
    made_up = [f"pmk_{i:012x}_" + "A" * 43 for i in range(5)]
    assert [await cache.verify(key) for key in made_up] == [None] * 5
    assert await cache.verify(whole) == record and store.verifies == 6


async def test_an_unknown_key_is_asked_of_the_store_once_within_the_ttl(store: CountingStore) -> None:
    cache = KeyCache(store, clock=Clock())
    made_up = "pmk_0123456789ab_" + "A" * 43
    assert [await cache.verify(made_up) for _ in range(3)] == [None] * 3
    assert store.verifies == 1


async def test_a_failed_read_is_not_kept(tmp_path: Path) -> None:
    unreadable = CountingStore(tmp_path)  # a folder: every read fails
    cache = KeyCache(unreadable, clock=Clock())
    whole = "pmk_0123456789ab_" + "A" * 43
    for _ in range(2):
        with pytest.raises(Exception):  # noqa: B017, PT011 - the store's own error, whatever it is
            await cache.verify(whole)
    assert unreadable.verifies == 2
    await unreadable.aclose()
