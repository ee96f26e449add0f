"""Reviewer R2's hostile review of today's gateway work: each test shows one bug found, now fixed."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
from pathlib import Path

import aiohttp

from provmw.plugins import PluginPolicy
from provmw.testing import FakeProvider
from tests.gateway.test_server import CHAT, post, running_gateway


def _ledger(tmp_path: Path, column: str) -> list[str]:
    with contextlib.closing(sqlite3.connect(tmp_path / "ledger.sqlite3")) as db:
        return [row[0] for row in db.execute(f"SELECT {column} FROM usage")]


async def test_a_whole_key_sent_as_the_request_id_is_not_kept_in_the_ledger(fake: FakeProvider,
                                                                           tmp_path: Path) -> None:
    # A client that sends its key as x-request-id (a misused header, a tracing library) must not put the
    # secret in the ledger's correlation_id, the traces or the response headers: the id is made anew.
    async with running_gateway(fake, tmp_path) as gw, aiohttp.ClientSession() as client, client.post(
            f"{gw.url}/v1/chat/completions", json=CHAT,
            headers={"authorization": f"Bearer {gw.key}", "x-request-id": gw.key}) as response:
        assert response.status == 200 and gw.key not in response.headers["x-request-id"]
    secret = gw.key[len("pmk_0123456789ab_"):]
    assert not [value for value in _ledger(tmp_path, "correlation_id") if secret in value]


def _closed_port_url() -> str:
    with socket.socket() as sock:  # a loopback port nothing listens on: connecting is refused at once
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


async def test_a_guard_check_that_is_down_is_a_retryable_503_not_the_clients_400(fake: FakeProvider,
                                                                                  tmp_path: Path) -> None:
    # The key's policy names an external check the operator runs; that check being down is the
    # gateway's outage, not a fault in the request: a 400 would tell the SDK never to retry it.
    check = {"base_url": _closed_port_url()}
    middleware = {"guard": {"policies": {"checked": {"check": check}}}}
    async with running_gateway(fake, tmp_path, middleware=middleware, plugins=PluginPolicy(allow=("guard",)),
                               guard="checked") as gw, aiohttp.ClientSession() as client:
        status, body, headers = await post(client, gw, "/v1/chat/completions", CHAT)
    assert (status, body["error"]["type"], fake.count()) == (503, "service_unavailable", 0)
    assert "retry-after" in headers and headers.get("x-should-retry") != "false"
