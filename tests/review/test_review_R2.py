"""Reviewer R2's hostile review of today's gateway work: each test shows one bug found, now fixed."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import aiohttp

from provmw.testing import FakeProvider
from tests.gateway.test_server import CHAT, running_gateway


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
