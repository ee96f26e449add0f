"""Readiness and the stack's gauges: a shared state that does not answer degrades the gateway (200) and
keeps it in rotation, a key store that does not answer takes it out (503); /metrics shows each
endpoint's breaker and each pool deployment's load.

``served`` (imported by the outage test too) runs a gateway over a settings document with the
Redis plugin allowed, and one key of organisation "acme".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest
from aiohttp import web

from provmw.gateway import GatewayOptions, SqliteKeyStore, gateway_app
from provmw.gateway.health import HealthCheck
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import parse_settings
from provmw.testing import FakeProvider, Fault

NOWHERE = "redis://127.0.0.1:1/0"  # nothing listens there: refused at once
CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hello"}]}


@attrs.frozen
class Served:
    url: str
    key: str
    key_id: str
    keys: SqliteKeyStore
    manager: ServiceManager


def document(fake: FakeProvider, tmp_path: Path, **middleware: Any) -> dict[str, Any]:
    """A configuration "chat" on the fake, the ledger and budgets in ``tmp_path``, retries off."""
    return {"default": "chat",
            "configurations": {"chat": {"provider": "openai", "model": "gpt-test", "base_url": fake.openai_base_url,
                                        "options": {"max_tokens": 100},  # a cost limit needs a worst case
                                        "price": {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0}}},
            "middleware": {"usage": {"path": str(tmp_path / "ledger.sqlite3")},
                           "budget": {"path": str(tmp_path / "budget.sqlite3")},
                           "retry": {"enabled": False}, **middleware}}


@contextlib.asynccontextmanager
async def served(settings: dict[str, Any], tmp_path: Path, options: GatewayOptions | None = None
                 ) -> AsyncIterator[Served]:
    keys = SqliteKeyStore(tmp_path / "keys.sqlite3")
    whole, record = await keys.create("acme")
    manager = ServiceManager(parse_settings(settings, "<test>", {}),
                             host=PluginHost(PluginPolicy(allow=("redis",)), environ={}))
    runner = web.AppRunner(gateway_app(manager, keys, options), handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        yield Served(f"http://{host}:{port}", whole, record.key_id, keys, manager)
    finally:
        await runner.cleanup()
        await manager.aclose()
        await keys.aclose()


def on_nowhere(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with budgets, breakers, rate limits and pools kept in a Redis that is not there."""
    return {**settings, "state": {"url": NOWHERE, "shared": ["budget", "circuit_breaker", "rate_limit", "pool"]}}


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def ready(client: aiohttp.ClientSession, gw: Served) -> tuple[int, dict[str, Any]]:
    async with client.get(f"{gw.url}/health/ready") as response:
        return response.status, await response.json()


async def metrics(client: aiohttp.ClientSession, gw: Served) -> str:
    async with client.get(f"{gw.url}/metrics") as response:
        return await response.text()


async def chat(client: aiohttp.ClientSession, gw: Served, body: dict[str, Any] = CHAT) -> int:
    async with client.post(f"{gw.url}/v1/chat/completions", json=body,
                           headers={"authorization": f"Bearer {gw.key}"}) as response:
        await response.read()
        return response.status


async def test_a_shared_state_that_does_not_answer_is_degraded_not_unready(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession) -> None:
    async with served(on_nowhere(document(fake, tmp_path)), tmp_path) as gw:
        status, body = await ready(client, gw)
    assert status == 200 and body["status"] == "degraded"
    assert body["degraded"] == ["budget", "circuit_breaker", "pool", "rate_limit"]
    assert "127.0.0.1:1" in body["shared_state"]


async def test_degraded_readiness_says_what_each_concern_does_meanwhile(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession) -> None:
    async with served(on_nowhere(document(fake, tmp_path)), tmp_path) as gw:
        _, body = await ready(client, gw)
    assert body["meaning"]["budget"].startswith("calls with a budget are refused (503")
    assert body["meaning"]["circuit_breaker"] == "this process's breakers decide"


async def test_a_degraded_gateway_serves_calls_without_a_budget(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession) -> None:
    async with served(on_nowhere(document(fake, tmp_path)), tmp_path) as gw:
        assert await chat(client, gw) == 200
    assert fake.count() == 1


async def test_a_degraded_gateway_refuses_a_budgeted_call_503_before_any_request(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession) -> None:
    async with served(on_nowhere(document(fake, tmp_path)), tmp_path) as gw:
        await gw.keys.set_budget("key", gw.key_id, "day", max_requests=100)
        assert await chat(client, gw) == 503
    assert fake.count() == 0


async def test_a_key_store_that_does_not_answer_is_not_ready_even_when_degraded(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession) -> None:
    async with served(on_nowhere(document(fake, tmp_path)), tmp_path) as gw:
        await gw.keys.aclose()
        status, body = await ready(client, gw)
    assert (status, body["status"]) == (503, "not_ready")


class CountingKeys(SqliteKeyStore):
    """A key store that counts readiness's reads."""

    reads = 0

    async def get(self, key_id: str) -> Any:
        self.reads += 1
        return await super().get(key_id)


async def test_readiness_is_kept_for_a_second(fake: FakeProvider, tmp_path: Path) -> None:
    now = [0.0]
    async with ServiceManager(parse_settings(document(fake, tmp_path), "<test>", {})) as manager:
        keys = CountingKeys(tmp_path / "keys.sqlite3")
        health = HealthCheck(manager, keys, clock=lambda: now[0])
        answers = [await health.readiness(), await health.readiness()]
        now[0] = 1.0
        answers.append(await health.readiness())
        await keys.aclose()
    assert [a.status for a in answers] == ["ready"] * 3 and keys.reads == 2


async def test_concurrent_readiness_probes_share_one_check(fake: FakeProvider, tmp_path: Path) -> None:
    async with ServiceManager(parse_settings(document(fake, tmp_path), "<test>", {})) as manager:
        keys = CountingKeys(tmp_path / "keys.sqlite3")
        health = HealthCheck(manager, keys)
        await asyncio.gather(*(health.readiness() for _ in range(20)))
        await keys.aclose()
    assert keys.reads == 1


BREAKER = {"circuit_breaker": {"window_size": 2, "min_calls": 2, "open_s": 60.0}}


async def test_metrics_show_an_open_breaker(fake: FakeProvider, tmp_path: Path,
                                            client: aiohttp.ClientSession) -> None:
    fake.fail_randomly(1.0, Fault(status=503))
    async with served(document(fake, tmp_path, **BREAKER), tmp_path) as gw:
        assert [await chat(client, gw) for _ in range(3)] == [503] * 3
        text = await metrics(client, gw)
    assert 'provmw_gateway_breaker_state{configuration="chat",state="open"} 1' in text
    assert 'provmw_gateway_breaker_state{configuration="chat",state="closed"} 0' in text


async def test_metrics_read_this_processs_breakers_while_the_shared_state_is_out(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession) -> None:
    fake.fail_randomly(1.0, Fault(status=503))
    async with served(on_nowhere(document(fake, tmp_path, **BREAKER)), tmp_path) as gw:
        assert [await chat(client, gw) for _ in range(3)] == [503] * 3
        text = await metrics(client, gw)
    assert 'provmw_gateway_breaker_state{configuration="chat",state="open"} 1' in text


def pooled(fake: FakeProvider, tmp_path: Path) -> dict[str, Any]:
    """The model "chat" as a pool of deployments "a" and "b" (models dep-a, dep-b), tried in order."""
    settings = document(fake, tmp_path)
    settings["configurations"] = {d: {"provider": "openai", "model": f"dep-{d}", "base_url": fake.openai_base_url}
                                  for d in ("a", "b")}
    settings["pools"] = {"chat": {"members": ["a", "b"], "strategy": "order"}}
    return settings


async def test_metrics_show_a_pool_deployment_cooling_down(fake: FakeProvider, tmp_path: Path,
                                                           client: aiohttp.ClientSession) -> None:
    fake.script(Fault(status=429, headers={"retry-after": "30"}), model="dep-a")
    async with served(pooled(fake, tmp_path), tmp_path) as gw:
        assert await chat(client, gw) == 200  # a cools down, b serves
        text = await metrics(client, gw)
    assert 'provmw_gateway_pool_cooling_down{pool="chat",deployment="a"} 1' in text
    assert 'provmw_gateway_pool_cooling_down{pool="chat",deployment="b"} 0' in text


async def test_metrics_show_a_pool_deployments_calls_in_flight(fake: FakeProvider, tmp_path: Path,
                                                               client: aiohttp.ClientSession) -> None:
    fake.script(Fault(stall_after=2, stall_s=30.0), model="dep-a")
    async with served(pooled(fake, tmp_path), tmp_path) as gw:
        held = await client.post(f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": True},
                                 headers={"authorization": f"Bearer {gw.key}"})
        await held.content.readline()  # the stream is open on a
        text = await metrics(client, gw)
        held.close()
    assert 'provmw_gateway_pool_in_flight{pool="chat",deployment="a"} 1' in text
