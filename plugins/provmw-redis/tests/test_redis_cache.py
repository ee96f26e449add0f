"""The shared cache: JSON under namespaced keys, signatures that bind entry to key, fill claims,
and poisoned entries that are misses and never execute."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis
from provmw_redis import RedisState
from test_redis_processes import document, manager

from provmw.testing import FakeProvider

from conftest import state_settings

pytestmark = pytest.mark.redis

SIGNING = "PROVMW_TEST_CACHE_SIGNING_KEY"
FAR_FUTURE_MS = 99_999_999_999_999


@pytest.fixture
def signing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SIGNING, "a-signing-secret")


@pytest.fixture
async def signed(prefix: str, signing_key: None) -> AsyncIterator[RedisState]:
    backend = RedisState(state_settings(prefix, signing_key_env=SIGNING))
    yield backend
    await backend.aclose()


async def test_an_entry_reads_back_under_its_namespaced_key(state: RedisState, prefix: str,
                                                           redis_sync: redis.Redis) -> None:
    await state.cache_store().set("default:abc", '{"a":1}', 60)
    assert await state.cache_store().get("default:abc") == '{"a":1}'
    assert redis_sync.exists(f"{prefix}:cache:default:abc")


async def test_an_entry_expires_after_its_ttl(state: RedisState) -> None:
    await state.cache_store().set("k", "{}", 0.05)
    await asyncio.sleep(0.1)
    assert await state.cache_store().get("k") is None


async def test_a_signed_entry_reads_back(signed: RedisState, prefix: str, redis_sync: redis.Redis) -> None:
    await signed.cache_store().set("k", '{"a":1}', 60)
    assert await signed.cache_store().get("k") == '{"a":1}'
    raw = redis_sync.get(f"{prefix}:cache:k")
    assert isinstance(raw, bytes) and raw.startswith(b"s2:")


async def test_an_entry_with_a_bad_signature_is_a_miss(signed: RedisState, prefix: str,
                                                       redis_sync: redis.Redis) -> None:
    redis_sync.set(f"{prefix}:cache:k", f"s2:{FAR_FUTURE_MS}:" + "0" * 64 + ':{"a":1}')
    assert await signed.cache_store().get("k") is None


async def test_an_unsigned_entry_is_a_miss_when_signing_is_on(signed: RedisState, prefix: str,
                                                              redis_sync: redis.Redis) -> None:
    redis_sync.set(f"{prefix}:cache:k", '{"a":1}')
    assert await signed.cache_store().get("k") is None


async def test_a_signed_entry_copied_under_another_key_is_a_miss(signed: RedisState, prefix: str,
                                                                 redis_sync: redis.Redis) -> None:
    await signed.cache_store().set("tenant-a", '{"a":1}', 60)
    redis_sync.copy(f"{prefix}:cache:tenant-a", f"{prefix}:cache:tenant-b")
    assert await signed.cache_store().get("tenant-b") is None


async def test_one_claim_at_a_time_across_handles(state: RedisState, prefix: str) -> None:
    other = RedisState(state_settings(prefix))
    token = await state.cache_store().claim("k", 5)
    assert token and await other.cache_store().claim("k", 5) is None
    await state.cache_store().unclaim("k", token)
    assert await other.cache_store().claim("k", 5)
    await other.aclose()


async def test_unclaiming_leaves_a_claim_taken_by_another_alone(state: RedisState) -> None:
    store = state.cache_store()
    stale = await store.claim("k", 0.05)
    await asyncio.sleep(0.1)  # the claim expired ...
    fresh = await store.claim("k", 5)  # ... and someone else took it
    assert stale and fresh
    await store.unclaim("k", stale)
    assert await store.claim("k", 5) is None


class Exploit:
    """Unpickling this creates a file: the proof that a payload was executed."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.marker.touch, ())


def poison(kind: str, marker: Path) -> bytes:
    if kind == "pickle":
        return pickle.dumps(Exploit(marker))
    if kind == "bad JSON":
        return b'{"type": "embedding", "vectors": [[0.1'
    return f"s2:{FAR_FUTURE_MS}:".encode() + b"f" * 64 + b':{"type": "embedding"}'  # a bad signature


@pytest.mark.parametrize("kind", ["pickle", "bad JSON", "bad signature"])
async def test_a_poisoned_entry_is_a_miss_and_executes_nothing(kind: str, fake: FakeProvider, prefix: str,
                                                               redis_sync: redis.Redis, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    settings = document(fake, prefix, cache={"operations": ["embedding"]})
    if kind != "bad signature":  # read unsigned: JSON decoding alone must refuse them
        monkeypatch.delenv("PROVMW_CACHE_SIGNING_KEY")
        settings["state"]["unsigned_cache"] = True
    async with manager(settings) as m:
        await m.embed("words")
        [key] = [k for k in redis_sync.scan_iter(match=f"{prefix}:cache:*") if not k.endswith(b":claim")]
        redis_sync.set(key, poison(kind, tmp_path / "executed"))
        again = await m.embed("words")
        third = await m.embed("words")
    assert not again.cached and third.cached  # a miss, refilled with a good entry
    assert fake.count() == 2
    assert not (tmp_path / "executed").exists()
