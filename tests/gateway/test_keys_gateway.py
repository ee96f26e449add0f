"""Who a gateway call is for, as its key says (ADR 0055): the user is the key's (else its id), never
the body's; a key naming a guard policy the gateway cannot apply is refused, not served unguarded."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from provmw.testing import FakeProvider
from tests.gateway.test_server import CHAT, post, running_gateway


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def _ledger_users(folder: Path) -> list[str | None]:
    with sqlite3.connect(folder / "ledger.sqlite3") as ledger:
        return [user for (user,) in ledger.execute("SELECT user FROM usage")]


@pytest.mark.parametrize(("user", "expected"), [("ada", "acme/ada"), (None, "key id")])
async def test_the_ledgers_user_is_the_keys_user_in_its_organisation_else_its_id_never_the_bodys(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession, user: str | None, expected: str) -> None:
    async with running_gateway(fake, tmp_path, user=user) as gw:
        status, _, _ = await post(client, gw, "/v1/chat/completions", {**CHAT, "user": "mallory"})
    assert status == 200
    assert _ledger_users(tmp_path) == [gw.record.key_id if expected == "key id" else expected]


async def test_a_key_with_a_guard_policy_is_refused_503_in_openais_envelope(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession) -> None:
    async with running_gateway(fake, tmp_path, guard="strict") as gw:
        status, body, headers = await post(client, gw, "/v1/chat/completions", CHAT)
    assert (status, body["error"]["code"]) == (503, "guard_policy_unavailable")
    assert body["error"]["message"] == "guard policy 'strict' is not available"
    assert headers["x-should-retry"] == "false" and fake.count() == 0


async def test_a_key_with_a_guard_policy_is_refused_503_in_anthropics_envelope(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession) -> None:
    body = {"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    async with running_gateway(fake, tmp_path, guard="strict") as gw:
        status, answer, _ = await post(client, gw, "/v1/messages", body)
    assert status == 503 and answer["error"]["message"] == "guard policy 'strict' is not available"
    assert fake.count() == 0


async def test_anthropics_metadata_user_id_does_not_choose_the_user_either(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession) -> None:
    body = {"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"user_id": "mallory"}}
    async with running_gateway(fake, tmp_path) as gw:
        status, _, _ = await post(client, gw, "/v1/messages", body)
    assert status == 200 and _ledger_users(tmp_path) == [gw.record.key_id]
