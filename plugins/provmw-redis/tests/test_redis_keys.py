"""The gateway's key store in Redis: the key store contract, a fleet's hosts seeing each other's
changes, no secret in any value, one hash slot, and ``--keys redis://...`` reaching it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis
from aiohttp import web
from provmw_redis import RedisKeyStore, RedisUnavailableError, provmw_key_store
from redis.crc import key_slot

from provmw.cli import main
from provmw.gateway import GatewayOptions, KeyCache, gateway_app
from provmw.gateway.conformance import KeyStoreConformance
from provmw.gateway.keys import KeyStore
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import openai_config

from conftest import REDIS_URL

pytestmark = pytest.mark.redis


class TestRedisKeyStore(KeyStoreConformance):
    @pytest.fixture(autouse=True)
    def _prefix(self, prefix: str) -> None:
        self.prefix = prefix  # every key under it is deleted after the test

    async def open_store(self, name: str) -> KeyStore:
        return RedisKeyStore.from_url(REDIS_URL, {"key_prefix": f"{self.prefix}-{name}"})


@pytest.fixture
async def hosts(prefix: str) -> AsyncIterator[tuple[RedisKeyStore, RedisKeyStore]]:
    """Two stores with clients of their own on one Redis, as two hosts of a fleet have."""
    first, second = (RedisKeyStore.from_url(REDIS_URL, {"key_prefix": prefix}) for _ in range(2))
    yield first, second
    await first.aclose()
    await second.aclose()


def stored(client: redis.Redis, prefix: str) -> dict[Any, list[Any]]:
    """Every Redis key under ``prefix`` with every field, member and value it holds (bytes)."""
    found: dict[Any, list[Any]] = {}
    for key in client.scan_iter(match=f"*{prefix}*"):
        kind = client.type(key)
        if kind == b"hash":
            found[key] = [part for pair in client.hgetall(key).items() for part in pair]
        elif kind == b"zset":
            found[key] = list(client.zrange(key, 0, -1))
        else:
            found[key] = [client.get(key)]
    return found


async def test_a_key_disabled_on_one_host_is_refused_by_another_once_its_cache_expires(
        hosts: tuple[RedisKeyStore, RedisKeyStore]) -> None:
    first, second = hosts
    now = [0.0]
    cache = KeyCache(second, ttl_s=2.0, clock=lambda: now[0])
    whole, record = await first.create("acme")
    assert not (await cache.verify(whole)).disabled  # type: ignore[union-attr]
    await first.disable(record.key_id)
    now[0] += 2.5
    assert (await cache.verify(whole)).disabled  # type: ignore[union-attr]


async def test_a_budget_set_on_one_host_applies_on_another(hosts: tuple[RedisKeyStore, RedisKeyStore]) -> None:
    first, second = hosts
    _, record = await first.create("acme", user="grace")
    await second.set_budget("user", "acme/grace", "day", max_tokens=50)
    assert [b.max_tokens for b in await first.budgets_for(record)] == [50]


@contextlib.asynccontextmanager
async def gateway(fake: FakeProvider, keys: RedisKeyStore, folder: Path) -> AsyncIterator[str]:
    """A gateway on loopback over ``fake`` behind ``keys``, asking the store on every request (TTL 0)."""
    settings = Settings(configurations={"chat": openai_config(fake, identifier="chat")},
                        middleware={"usage": {"path": str(folder / "ledger.sqlite3")}})
    manager = ServiceManager(settings, host=PluginHost(PluginPolicy(autoload=False), environ={}))
    runner = web.AppRunner(gateway_app(manager, keys, GatewayOptions(key_cache_ttl_s=0)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield "http://{}:{}".format(*runner.addresses[0][:2])
    finally:
        await runner.cleanup()
        await manager.aclose()


async def test_a_gateway_serves_a_key_made_on_another_host_until_that_host_disables_it(
        fake: FakeProvider, hosts: tuple[RedisKeyStore, RedisKeyStore], tmp_path: Path) -> None:
    admin, served = hosts
    whole, record = await admin.create("acme")
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    async with gateway(fake, served, tmp_path) as url, aiohttp.ClientSession() as client:
        call = functools.partial(client.post, f"{url}/v1/chat/completions", json=body,
                                 headers={"authorization": f"Bearer {whole}"})
        async with call() as answer:
            assert answer.status == 200
        await admin.disable(record.key_id)
        async with call() as answer:
            assert answer.status == 401


async def test_two_hosts_rotating_one_key_at_once_make_one_successor(
        hosts: tuple[RedisKeyStore, RedisKeyStore]) -> None:
    first, second = hosts
    _, old = await first.create("acme")
    outcomes = await asyncio.gather(first.rotate(old.key_id), second.rotate(old.key_id), return_exceptions=True)
    assert sorted(type(o).__name__ for o in outcomes) == ["ConfigurationError", "tuple"]
    assert [r.disabled for r in await second.list("acme")] == [True, False]


async def test_no_value_holds_a_keys_secret(hosts: tuple[RedisKeyStore, RedisKeyStore], prefix: str,
                                            redis_sync: redis.Redis) -> None:
    first, _ = hosts
    whole, record = await first.create("acme", team="t", user="u", models=["m"], name="n")
    await first.set_budget("key", record.key_id, "day", max_requests=1)
    rotated, _ = await first.rotate(record.key_id)
    await first.record_response("resp_1", "acme")
    held = stored(redis_sync, prefix)
    assert len(held) == 7  # two keys, two lists, two budgets, one response
    for key in (whole, rotated):
        secret = key.rsplit("_", 1)[1].encode()
        assert not any(secret in part for name, parts in held.items() for part in (name, *parts))


async def test_every_key_of_the_store_is_in_one_hash_slot(hosts: tuple[RedisKeyStore, RedisKeyStore], prefix: str,
                                                          redis_sync: redis.Redis) -> None:
    first, _ = hosts
    _, record = await first.create("acme", team="t")
    await first.set_budget("team", "acme/t", "day", max_requests=1)
    await first.rotate(record.key_id)
    await first.record_response("resp_1", "acme")
    assert len({key_slot(key) for key in stored(redis_sync, prefix)}) == 1


async def test_an_unreachable_redis_is_a_typed_error() -> None:
    store = RedisKeyStore.from_url("redis://127.0.0.1:1/0")  # nothing listens on port 1
    with pytest.raises(RedisUnavailableError):
        await store.get("0123456789ab")
    await store.aclose()


def test_the_plugin_serves_redis_urls_only() -> None:
    assert isinstance(provmw_key_store("redis://h:6379/0", {"key_prefix": "gw"}), RedisKeyStore)
    assert provmw_key_store("postgresql://h/db", {}) is None


def test_provmw_keys_creates_and_lists_keys_in_redis_under_the_states_prefix(
        redis_url: str, redis_sync: redis.Redis, prefix: str, tmp_path: Path) -> None:
    config = tmp_path / "provmw.toml"
    config.write_text(f'[state]\nurl = "{redis_url}"\nkey_prefix = "{prefix}"\n')
    given = ["--config", str(config), "keys"]
    out = io.StringIO()
    assert main([*given, "create", "--organisation", "acme", "--keys", redis_url], out=out) == 0
    key_id = out.getvalue().split("_")[1]
    listed = io.StringIO()
    assert main([*given, "list", "--format", "json", "--keys", redis_url], out=listed) == 0
    assert key_id in listed.getvalue() and redis_sync.exists(f"{{{prefix}:keys}}:k:{key_id}")
