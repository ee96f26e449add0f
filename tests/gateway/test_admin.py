"""The admin API (/admin): keys and budgets over HTTP for the admin token only, the same store calls and
checks as ``provmw keys``, and each change binding the running gateway within its key cache's TTL."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from provmw.gateway.admin import MAX_BODY_BYTES
from provmw.gateway.app import GatewayOptions
from provmw.gateway.ui import ADMIN_TOKEN_ENV
from provmw.testing import FakeClock, FakeProvider
from tests.gateway.test_server import Running, running_gateway

TOKEN = "admin-TOKEN-for-tests-9c2d"
TTL_S = 2.0  # GatewayOptions' key cache TTL
CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def gw(fake: FakeProvider, tmp_path: Path, clock: FakeClock,
             monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Running]:
    monkeypatch.setenv(ADMIN_TOKEN_ENV, TOKEN)
    async with running_gateway(fake, tmp_path, options=GatewayOptions(clock=clock), team="search") as running:
        yield running


async def admin(client: aiohttp.ClientSession, gw: Running, method: str, path: str, body: Any = None, *,
                token: str | None = TOKEN, data: Any = None) -> tuple[int, Any, Any]:
    """One admin request: its status, its JSON and its headers."""
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    async with client.request(method, f"{gw.url}{path}", json=body, data=data, headers=headers) as response:
        return response.status, await response.json(), response.headers


async def chat(client: aiohttp.ClientSession, gw: Running, key: str) -> tuple[int, Any]:
    async with client.post(f"{gw.url}/v1/chat/completions", json=CHAT,
                           headers={"authorization": f"Bearer {key}"}) as response:
        return response.status, await response.json()


async def test_with_no_admin_token_configured_every_admin_path_is_404(
        fake: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: aiohttp.ClientSession) -> None:
    monkeypatch.delenv(ADMIN_TOKEN_ENV, raising=False)
    async with running_gateway(fake, tmp_path) as gw:
        for method, path in (("GET", "/admin/keys"), ("POST", "/admin/keys"), ("PUT", "/admin/budgets"),
                             ("POST", f"/admin/keys/{gw.record.key_id}/disable")):
            status, body, _ = await admin(client, gw, method, path, {"organisation": "evil"})
            assert (status, body["error"]["code"]) == (404, "not_found")
        assert await gw.keys.list("evil") == []


async def test_a_missing_token_is_401_with_a_challenge(gw: Running, client: aiohttp.ClientSession) -> None:
    status, body, headers = await admin(client, gw, "GET", "/admin/keys", token=None)
    assert status == 401 and body["error"]["type"] == "authentication_error"
    assert headers["www-authenticate"] == 'Bearer realm="provmw admin"'


async def test_a_wrong_token_or_a_virtual_key_is_401(gw: Running, client: aiohttp.ClientSession) -> None:
    for token in (TOKEN + "x", TOKEN[:-1], gw.key):
        status, _, _ = await admin(client, gw, "POST", "/admin/keys", {"organisation": "evil"}, token=token)
        assert status == 401
    assert await gw.keys.list("evil") == []


async def test_create_answers_201_with_a_whole_key_that_calls(gw: Running, client: aiohttp.ClientSession) -> None:
    status, body, _ = await admin(client, gw, "POST", "/admin/keys",
                                  {"organisation": "globex", "team": "ml", "user": "grace", "models": ["chat"]})
    assert status == 201
    record = body["record"]
    assert (record["organisation"], record["team"], record["user"], record["models"]) == ("globex", "ml", "grace",
                                                                                       ["chat"])
    assert body["key"].startswith(f"pmk_{record['key_id']}_")
    assert (await chat(client, gw, body["key"]))[0] == 200


async def test_the_list_holds_records_with_no_secret_and_no_hash(gw: Running, client: aiohttp.ClientSession) -> None:
    status, body, _ = await admin(client, gw, "GET", "/admin/keys")
    assert status == 200
    assert [record["key_id"] for record in body["keys"]] == [gw.record.key_id]
    assert set(body["keys"][0]) == {"key_id", "organisation", "team", "user", "models", "guard", "status",
                                    "created_at", "rotated_from", "name"}


async def test_the_list_filters_by_organisation(gw: Running, client: aiohttp.ClientSession) -> None:
    _, other = await gw.keys.create("globex")
    _, body, _ = await admin(client, gw, "GET", "/admin/keys?organisation=globex")
    assert [record["key_id"] for record in body["keys"]] == [other.key_id]


async def test_get_answers_one_keys_record(gw: Running, client: aiohttp.ClientSession) -> None:
    status, body, _ = await admin(client, gw, "GET", f"/admin/keys/{gw.record.key_id}")
    assert status == 200
    assert (body["record"]["key_id"], body["record"]["team"], body["record"]["status"]) == (
        gw.record.key_id, "search", "enabled")


@pytest.mark.parametrize(("method", "path"), [("GET", ""), ("POST", "/disable"), ("POST", "/rotate")])
async def test_an_unknown_key_id_is_404(gw: Running, client: aiohttp.ClientSession, method: str, path: str) -> None:
    status, body, _ = await admin(client, gw, method, f"/admin/keys/0123456789ab{path}")
    assert (status, body["error"]["code"]) == (404, "key_not_found")


async def test_a_key_disabled_through_the_api_is_refused_within_the_cache_ttl(
        gw: Running, client: aiohttp.ClientSession, clock: FakeClock) -> None:
    assert (await chat(client, gw, gw.key))[0] == 200  # the key's record is in the cache now
    status, body, _ = await admin(client, gw, "POST", f"/admin/keys/{gw.record.key_id}/disable")
    assert (status, body["record"]["status"]) == (200, "disabled")
    clock.advance(TTL_S + 0.01)
    status, refused = await chat(client, gw, gw.key)
    assert (status, refused["error"]["code"]) == (401, "key_disabled")


async def test_rotate_answers_201_with_a_new_key_and_the_old_is_refused(
        gw: Running, client: aiohttp.ClientSession, clock: FakeClock) -> None:
    assert (await chat(client, gw, gw.key))[0] == 200
    status, body, _ = await admin(client, gw, "POST", f"/admin/keys/{gw.record.key_id}/rotate")
    assert (status, body["record"]["rotated_from"], body["record"]["team"]) == (201, gw.record.key_id, "search")
    clock.advance(TTL_S + 0.01)
    assert (await chat(client, gw, gw.key))[0] == 401
    assert (await chat(client, gw, body["key"]))[0] == 200


async def test_rotating_a_key_twice_is_400_naming_its_successor(gw: Running, client: aiohttp.ClientSession) -> None:
    _, first, _ = await admin(client, gw, "POST", f"/admin/keys/{gw.record.key_id}/rotate")
    status, body, _ = await admin(client, gw, "POST", f"/admin/keys/{gw.record.key_id}/rotate")
    assert status == 400 and first["record"]["key_id"] in body["error"]["message"]


async def test_a_budget_set_through_the_api_binds_the_next_calls(gw: Running, client: aiohttp.ClientSession,
                                                                  clock: FakeClock) -> None:
    assert (await chat(client, gw, gw.key))[0] == 200  # the key's budgets (none) are in the cache now
    status, body, _ = await admin(client, gw, "PUT", "/admin/budgets",
                                  {"scope": "team", "subject": "acme/search", "period": "day", "max_requests": 0})
    assert (status, body["limit"]["max_requests"]) == (200, 0)
    clock.advance(TTL_S + 0.01)
    status, refused = await chat(client, gw, gw.key)
    assert (status, refused["error"]["code"]) == (429, "budget_exceeded")
    assert gw.fake.count() == 1


async def test_a_budget_with_no_maximum_is_removed(gw: Running, client: aiohttp.ClientSession) -> None:
    await gw.keys.set_budget("organisation", "acme", "month", max_cost_usd=5.0)
    status, body, _ = await admin(client, gw, "PUT", "/admin/budgets",
                                  {"scope": "organisation", "subject": "acme", "period": "month"})
    assert (status, body) == (200, {"removed": True})
    assert await gw.keys.budgets_for(gw.record) == ()


async def test_a_budget_for_an_unknown_key_is_404(gw: Running, client: aiohttp.ClientSession) -> None:
    status, body, _ = await admin(client, gw, "PUT", "/admin/budgets",
                                  {"scope": "key", "subject": "0123456789ab", "period": "day", "max_requests": 1})
    assert (status, body["error"]["code"]) == (404, "key_not_found")


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/admin/keys", {"team": "search"}, "organisation"),
    ("/admin/keys", {"organisation": "acme", "team": "a/b"}, "team"),
    ("/admin/keys", {"organisation": "acme", "models": "chat"}, "models"),
    ("/admin/keys", {"organisation": "acme", "name": 7}, "name"),
    ("/admin/budgets", {"scope": "galaxy", "subject": "acme", "period": "day", "max_requests": 1}, "scope"),
    ("/admin/budgets", {"scope": "team", "subject": "search", "period": "day", "max_requests": 1}, "subject"),
    ("/admin/budgets", {"scope": "organisation", "subject": "acme", "period": "year", "max_requests": 1}, "period"),
    ("/admin/budgets", {"scope": "organisation", "subject": "acme", "period": "day", "max_tokens": -1}, "max_tokens"),
    ("/admin/budgets", {"scope": "organisation", "subject": "acme", "period": "day", "max_tokens": 2**64},
     "max_tokens"),
])
async def test_an_invalid_field_is_400_naming_it(gw: Running, client: aiohttp.ClientSession, path: str,
                                                 body: dict[str, Any], field: str) -> None:
    status, answer, _ = await admin(client, gw, "PUT" if "budgets" in path else "POST", path, body)
    assert (status, answer["error"]["param"]) == (400, field)
    assert field in answer["error"]["message"]


async def test_an_unknown_field_is_400_naming_it(gw: Running, client: aiohttp.ClientSession) -> None:
    status, body, _ = await admin(client, gw, "POST", "/admin/keys", {"organization": "acme"})
    assert (status, body["error"]["param"]) == (400, "organization")


@pytest.mark.parametrize("data", [b"[]", b"not json", b""])
async def test_a_body_that_is_not_a_json_object_is_400(gw: Running, client: aiohttp.ClientSession,
                                                       data: bytes) -> None:
    status, body, _ = await admin(client, gw, "POST", "/admin/keys", data=data)
    assert (status, body["error"]["code"]) == (400, "invalid_json")


async def chunks(data: bytes) -> AsyncIterator[bytes]:
    """``data`` sent chunked: the request does not say its length."""
    for start in range(0, len(data), 1000):
        yield data[start:start + 1000]


@pytest.mark.parametrize("chunked", [False, True])
async def test_a_body_over_the_limit_is_413(gw: Running, client: aiohttp.ClientSession, chunked: bool) -> None:
    data = json.dumps({"organisation": "acme", "name": "x" * MAX_BODY_BYTES}).encode()
    status, body, _ = await admin(client, gw, "POST", "/admin/keys", data=chunks(data) if chunked else data)
    assert (status, body["error"]["code"]) == (413, "request_too_large")
    assert len(await gw.keys.list()) == 1


async def test_only_the_create_and_rotate_answers_hold_a_key(gw: Running, client: aiohttp.ClientSession) -> None:
    _, created, _ = await admin(client, gw, "POST", "/admin/keys", {"organisation": "acme"})
    key_id = created["record"]["key_id"]
    for method, path in (("GET", "/admin/keys"), ("GET", f"/admin/keys/{key_id}"),
                         ("POST", f"/admin/keys/{key_id}/disable")):
        _, body, headers = await admin(client, gw, method, path)
        assert "key" not in body and "pmk_" not in str(body)
        assert headers["cache-control"] == "no-store"


async def test_the_log_has_an_audit_line_and_never_the_whole_key(gw: Running, client: aiohttp.ClientSession,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    _, created, _ = await admin(client, gw, "POST", "/admin/keys", {"organisation": "globex"})
    key_id = created["record"]["key_id"]
    _, rotated, _ = await admin(client, gw, "POST", f"/admin/keys/{key_id}/rotate")
    assert f"admin: key created {key_id} for globex" in caplog.messages
    assert f"admin: key rotated {key_id} to {rotated['record']['key_id']}" in caplog.messages
    assert created["key"] not in caplog.text and rotated["key"] not in caplog.text
    assert "pmk_" not in caplog.text


async def test_a_key_store_that_fails_is_503(gw: Running, client: aiohttp.ClientSession) -> None:
    await gw.keys.aclose()  # every read fails from now on
    status, body, headers = await admin(client, gw, "GET", "/admin/keys")
    assert (status, body["error"]["code"]) == (503, "service_unavailable")
    assert "retry-after" in headers
