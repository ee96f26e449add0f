"""The shared cache does not trust Redis: entries are signed by default, bound to their key and their
expiry, and without a key the cache is not shared unless the settings opt out, loudly."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import redis
from provmw_redis import RedisState
from provmw_redis.cache import RedisCacheStore
from test_redis_plugin import build
from test_redis_processes import document, manager

from provmw.errors import ConfigurationError
from provmw.testing import FakeProvider

from conftest import REDIS_URL, state_settings

pytestmark = pytest.mark.redis

KEY_VARIABLE = "PROVMW_CACHE_SIGNING_KEY"


async def test_the_cache_is_signed_by_default(state: RedisState, prefix: str, redis_sync: redis.Redis) -> None:
    await state.cache_store().set("k", '{"a":1}', 60)
    raw = redis_sync.get(f"{prefix}:cache:k")
    assert isinstance(raw, bytes) and raw.startswith(b"s2:") and raw.endswith(b':{"a":1}')


async def test_a_forged_entry_is_refused_by_default(state: RedisState, prefix: str, redis_sync: redis.Redis) -> None:
    redis_sync.set(f"{prefix}:cache:tenant-a:k", '{"type": "completion", "text": "forged"}')
    assert await state.cache_store().get("tenant-a:k") is None


@pytest.mark.parametrize("forged", ["s2:9999999999999:é:{}", "s2:soon:abc:{}"],
                         ids=["non-ASCII signature", "bad expiry"])
async def test_a_malformed_signed_entry_is_a_miss_not_a_store_failure(
        state: RedisState, prefix: str, redis_sync: redis.Redis, forged: str, caplog: pytest.LogCaptureFixture) -> None:
    redis_sync.set(f"{prefix}:cache:tenant-a:k", forged)
    assert await state.cache_store().get("tenant-a:k") is None
    assert "unreachable" not in caplog.text


async def test_an_entry_copied_under_another_tenant_s_key_is_refused(state: RedisState, prefix: str,
                                                                     redis_sync: redis.Redis) -> None:
    await state.cache_store().set("tenant-a:k", '{"a":1}', 60)
    redis_sync.copy(f"{prefix}:cache:tenant-a:k", f"{prefix}:cache:tenant-b:k")
    assert await state.cache_store().get("tenant-b:k") is None


async def test_an_entry_copied_to_another_deployment_s_prefix_is_refused(state: RedisState, prefix: str,
                                                                         redis_sync: redis.Redis) -> None:
    await state.cache_store().set("k", '{"a":1}', 60)
    redis_sync.copy(f"{prefix}:cache:k", f"{prefix}-other:cache:k")
    other = RedisState(state_settings(f"{prefix}-other"))
    assert await other.cache_store().get("k") is None
    await other.aclose()


async def test_an_expired_entry_written_back_is_refused(state: RedisState, prefix: str,
                                                        redis_sync: redis.Redis) -> None:
    now = [1_000.0]
    store = RedisCacheStore(state, clock=lambda: now[0])
    await store.set("k", '{"a":1}', 60)
    raw = redis_sync.get(f"{prefix}:cache:k")
    now[0] += 61  # the entry expired; a writer to Redis puts it back, without a TTL
    redis_sync.set(f"{prefix}:cache:k", raw)  # type: ignore[arg-type]
    assert await store.get("k") is None


async def test_only_the_first_refusal_is_a_warning(state: RedisState, prefix: str, redis_sync: redis.Redis,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    store = state.cache_store()
    for key in ("a", "b", "c"):
        redis_sync.set(f"{prefix}:cache:{key}", "forged")
        assert await store.get(key) is None
    assert [r.levelno for r in caplog.records if "fails its signature" in r.getMessage()] == [logging.WARNING]


def forged(raw: bytes) -> str:
    """The entry's JSON with the answer's text replaced, written as an unsigned entry would be."""
    entry = json.loads(raw.split(b":", 3)[3] if raw.startswith(b"s2:") else raw)
    entry["response"]["text"] = "FORGED"
    return json.dumps(entry)


async def test_a_forged_idempotency_entry_is_refused(fake: FakeProvider, prefix: str,
                                                     redis_sync: redis.Redis) -> None:
    async with manager(document(fake, prefix)) as m:
        await m.chat("hello", idempotency_key="order-7")
        [key] = [k for k in redis_sync.scan_iter(match=f"{prefix}:cache:idempotency:*") if not k.endswith(b":claim")]
        redis_sync.set(key, forged(redis_sync.get(key)))  # type: ignore[arg-type]
        again = await m.chat("hello", idempotency_key="order-7")
    assert again.text != "FORGED"


def test_without_a_key_sharing_the_cache_is_refused_at_start_saying_how(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_VARIABLE)
    with pytest.raises(ConfigurationError, match=rf"sharing the cache and idempotency needs a signing key"
                       rf".*{KEY_VARIABLE} is not set.*openssl rand -hex 32.*unsigned_cache = true"):
        build({"url": REDIS_URL})


def test_without_a_key_state_that_shares_no_cache_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_VARIABLE)
    assert build({"url": REDIS_URL, "shared": ["budget", "rate_limit"]}).state.shared is not None


def test_a_short_signing_key_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VARIABLE, "short")
    with pytest.raises(ConfigurationError, match=f"signing key in {KEY_VARIABLE} is 5 characters; use at least 16"):
        build({"url": REDIS_URL})


def test_unsigned_cache_must_be_true_or_false() -> None:
    with pytest.raises(ConfigurationError, match=r"\[state\]: .*unsigned_cache"):
        build({"url": REDIS_URL, "unsigned_cache": "yes"})


async def test_the_opt_out_starts_stores_unsigned_entries_and_logs_a_warning(
        monkeypatch: pytest.MonkeyPatch, prefix: str, redis_sync: redis.Redis,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(KEY_VARIABLE)
    unsigned: Any = build({"url": REDIS_URL, "key_prefix": prefix, "unsigned_cache": True}).state.shared
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "unsigned_cache = true" in warning.getMessage() and "forged" in warning.getMessage()
    await unsigned.cache_store().set("k", '{"a":1}', 60)
    assert redis_sync.get(f"{prefix}:cache:k") == b'{"a":1}'
    await unsigned.aclose()
