"""The gateway server over raw HTTP: keys, models, limits, errors in each wire's envelope, health, metrics.

``running`` (imported by the SDK tests too) starts a gateway on loopback whose manager calls a
FakeProvider, with one key of organisation "acme".
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest
from aiohttp import web

from provmw.config import ProviderConfig
from provmw.gateway import SqliteKeyStore
from provmw.gateway.app import GatewayOptions, gateway_app
from provmw.gateway.keys import KeyRecord
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault
from tests.conftest import SENTINEL_KEY, anthropic_config, openai_config


@attrs.frozen
class Running:
    url: str
    key: str
    record: KeyRecord
    keys: SqliteKeyStore
    fake: FakeProvider
    manager: ServiceManager


@contextlib.asynccontextmanager
async def running_gateway(fake: FakeProvider, tmp_path: Path, *, middleware: Mapping[str, Any] | None = None,
                          options: GatewayOptions | None = None, plugins: PluginPolicy | None = None,
                          **create: Any) -> AsyncIterator[Running]:
    """A gateway on loopback over ``fake``: configurations "chat" (OpenAI's wire), "claude" (Anthropic's),
    "rank" (Cohere's), the alias "fast" of "chat"; no plugin loaded unless ``plugins`` allows it."""
    layers = {"usage": {"path": str(tmp_path / "ledger.sqlite3")}, "budget": {"path": str(tmp_path / "b.sqlite3")},
              **(middleware or {})}
    rank = ProviderConfig(identifier="rank", provider="cohere", model="rerank-v3.5", base_url=fake.url,
                          api_key=SENTINEL_KEY)
    settings = Settings(configurations={"chat": openai_config(fake, identifier="chat"),
                                        "claude": anthropic_config(fake, identifier="claude"), "rank": rank},
                        aliases={"fast": "chat"}, middleware=layers)
    keys = SqliteKeyStore(tmp_path / "keys.sqlite3")
    whole, record = await keys.create("acme", **create)
    manager = ServiceManager(settings, host=PluginHost(plugins or PluginPolicy(autoload=False), environ={}))
    runner = web.AppRunner(gateway_app(manager, keys, options or GatewayOptions()), handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield Running(f"http://{host}:{port}", whole, record, keys, fake, manager)
    finally:
        await runner.cleanup()
        await manager.aclose()
        await keys.aclose()


@pytest.fixture
async def gw(fake: FakeProvider, tmp_path: Path) -> AsyncIterator[Running]:
    async with running_gateway(fake, tmp_path) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hello there"}]}


async def post(client: aiohttp.ClientSession, gw: Running, path: str, body: Any, *,
               key: str | None = "valid", **headers: str) -> tuple[int, Any, Mapping[str, str]]:
    if key is not None:
        headers["authorization"] = f"Bearer {gw.key if key == 'valid' else key}"
    async with client.post(f"{gw.url}{path}", json=body, headers=headers) as response:
        return response.status, await response.json(content_type=None), response.headers


@pytest.mark.parametrize("key", [None, "pmk_000000000000_nope", "not-a-key"])
async def test_no_or_unknown_key_is_refused_401_and_nothing_is_sent(gw: Running, client: aiohttp.ClientSession,
                                                                    key: str | None) -> None:
    status, body, _ = await post(client, gw, "/v1/chat/completions", CHAT, key=key)
    assert status == 401 and body["error"]["type"] == "authentication_error"
    assert gw.fake.count() == 0


async def test_a_disabled_key_is_refused_401_naming_it(gw: Running, client: aiohttp.ClientSession) -> None:
    await gw.keys.disable(gw.record.key_id)
    status, body, _ = await post(client, gw, "/v1/chat/completions", CHAT)
    assert status == 401 and gw.record.key_id in body["error"]["message"]
    assert gw.fake.count() == 0


async def test_anthropic_wire_refuses_in_its_envelope(gw: Running, client: aiohttp.ClientSession) -> None:
    body = {"model": "claude", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    status, answer, _ = await post(client, gw, "/v1/messages", body, key=None, **{"x-api-key": "pmk_bad"})
    assert status == 401
    assert answer == {"type": "error", "error": {"type": "authentication_error", "message": "invalid API key"}}


async def test_a_model_the_key_may_not_use_is_404(fake: FakeProvider, tmp_path: Path,
                                                  client: aiohttp.ClientSession) -> None:
    async with running_gateway(fake, tmp_path, models=("claude",)) as gw:
        status, body, _ = await post(client, gw, "/v1/chat/completions", CHAT)
    assert status == 404 and body["error"]["code"] == "model_not_found"
    assert fake.count() == 0


async def test_an_unknown_model_is_404(gw: Running, client: aiohttp.ClientSession) -> None:
    status, body, _ = await post(client, gw, "/v1/chat/completions", {**CHAT, "model": "gpt-nope"})
    assert status == 404 and body["error"]["param"] == "model"


async def test_models_lists_what_the_key_may_call(fake: FakeProvider, tmp_path: Path,
                                                  client: aiohttp.ClientSession) -> None:
    async with running_gateway(fake, tmp_path, models=("fast", "claude")) as gw:
        response = await client.get(f"{gw.url}/v1/models", headers={"authorization": f"Bearer {gw.key}"})
        body = await response.json()
    assert [m["id"] for m in body["data"]] == ["fast", "claude"]


async def test_a_body_over_the_limit_is_413(fake: FakeProvider, tmp_path: Path,
                                            client: aiohttp.ClientSession) -> None:
    async with running_gateway(fake, tmp_path, options=GatewayOptions(max_body_bytes=1024)) as gw:
        status, body, _ = await post(client, gw, "/v1/chat/completions", {**CHAT, "pad": "x" * 2048})
    assert status == 413 and body["error"]["code"] == "request_too_large"


async def test_a_key_over_its_concurrency_is_429(fake: FakeProvider, tmp_path: Path,
                                                 client: aiohttp.ClientSession) -> None:
    fake.script(Fault(stall_after=2, stall_s=30.0))
    async with running_gateway(fake, tmp_path, options=GatewayOptions(max_concurrent_per_key=1)) as gw:
        held = await client.post(f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": True},
                                 headers={"authorization": f"Bearer {gw.key}"})
        await held.content.readline()  # the stream is open: its slot is taken
        status, body, headers = await post(client, gw, "/v1/chat/completions", CHAT)
        held.close()
    assert status == 429 and body["error"]["code"] == "concurrency_limit" and "retry-after" in headers


async def test_a_malformed_body_is_400(gw: Running, client: aiohttp.ClientSession) -> None:
    status, body, _ = await post(client, gw, "/v1/chat/completions", {**CHAT, "messages": 3})
    assert status == 400 and body["error"]["type"] == "invalid_request_error"


async def test_an_upstream_auth_failure_is_502_not_the_clients_401(gw: Running, client: aiohttp.ClientSession) -> None:
    gw.fake.script(Fault(status=401, message="bad upstream key"))
    status, body, _ = await post(client, gw, "/v1/chat/completions", CHAT)
    assert status == 502 and "bad upstream key" not in body["error"]["message"]


async def test_an_upstream_outage_is_503(fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession) -> None:
    fake.script(Fault(status=503, headers={"retry-after": "7"}))
    async with running_gateway(fake, tmp_path, middleware={"retry": {"enabled": False}}) as gw:
        status, _, headers = await post(client, gw, "/v1/chat/completions", CHAT)
    assert status == 503 and headers["retry-after"] == "7"


async def test_health_is_live_and_ready(gw: Running, client: aiohttp.ClientSession) -> None:
    async with client.get(f"{gw.url}/health") as live, client.get(f"{gw.url}/health/ready") as ready:
        assert (live.status, await live.json()) == (200, {"status": "live"})
        assert ready.status == 200 and (await ready.json())["status"] == "ready"


async def test_metrics_count_requests_and_tokens_by_key_id(gw: Running, client: aiohttp.ClientSession) -> None:
    await post(client, gw, "/v1/chat/completions", CHAT)
    async with client.get(f"{gw.url}/metrics") as response:
        text = await response.text()
    key_id = gw.record.key_id
    assert f'provmw_gateway_requests_total{{endpoint="chat_completions",status="200",key_id="{key_id}"}} 1' in text
    assert f'provmw_gateway_tokens_total{{key_id="{key_id}",direction="output"}}' in text


async def test_the_secret_is_in_no_log_metric_or_answer(gw: Running, client: aiohttp.ClientSession,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secret = gw.key.split("_", 2)[2]
    _, answer, _ = await post(client, gw, "/v1/chat/completions", CHAT)
    await post(client, gw, "/v1/chat/completions", {**CHAT, "model": "nope"})
    async with client.get(f"{gw.url}/metrics") as response:
        metrics = await response.text()
    assert secret not in caplog.text and secret not in metrics and secret not in str(answer)


async def test_the_ledger_holds_the_keys_user_never_its_secret(fake: FakeProvider, tmp_path: Path,
                                                               client: aiohttp.ClientSession) -> None:
    async with running_gateway(fake, tmp_path, user="alice") as gw:
        status, _, _ = await post(client, gw, "/v1/chat/completions", CHAT)
    ledger = _files_bytes(tmp_path, "ledger.sqlite3*")
    assert status == 200 and b"alice" in ledger and gw.key.split("_", 2)[2].encode() not in ledger


def _files_bytes(folder: Path, pattern: str) -> bytes:
    """Every byte of the files matching ``pattern`` (the database and its WAL), read once the gateway closed."""
    return b"".join(p.read_bytes() for p in folder.glob(pattern))


async def test_not_ready_while_the_key_store_does_not_answer(gw: Running, client: aiohttp.ClientSession) -> None:
    await gw.keys.aclose()
    async with client.get(f"{gw.url}/health/ready") as ready, client.get(f"{gw.url}/health") as live:
        assert ready.status == 503 and (await ready.json())["status"] == "not_ready"
        assert live.status == 200
