"""A key's guard policy (``provmw keys create --guard NAME``, ADR 0055): the gateway passes it to the
guard as ``controls={"guard_policy": NAME}``; a key whose policy cannot be applied (no such policy, no
guard installed or enabled) is refused 503 before anything is sent, never served unguarded."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from provmw.plugins import PluginPolicy
from provmw.testing import FakeProvider
from tests.gateway.test_server import CHAT, post, running_gateway

GUARD = PluginPolicy(allow=("guard",))
STRICT = {"guard": {"policies": {"strict": {"deny": [{"rule": "no-ssn", "regex": r"\b\d{3}-\d{2}-\d{4}\b"}]}}}}
SSN = {"model": "chat", "messages": [{"role": "user", "content": "my ssn is 078-05-1120"}]}


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_a_key_with_a_policy_is_refused_400_naming_its_rule(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession) -> None:
    async with running_gateway(fake, tmp_path, middleware=STRICT, plugins=GUARD, guard="strict") as gw:
        status, body, _ = await post(client, gw, "/v1/chat/completions", SSN)
    assert (status, body["error"]["code"], fake.count()) == (400, "guard_refused", 0)
    assert "deny:no-ssn" in body["error"]["message"] and "078-05" not in body["error"]["message"]


async def test_a_key_without_a_policy_is_guarded_by_the_top_level_settings(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession) -> None:
    async with running_gateway(fake, tmp_path, middleware=STRICT, plugins=GUARD, guard="strict") as gw:
        plain, _ = await gw.keys.create("acme")
        status, _, _ = await post(client, gw, "/v1/chat/completions", SSN, key=plain)
    assert (status, fake.count()) == (200, 1)


async def test_a_key_with_a_policy_is_served_what_the_policy_allows(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession) -> None:
    async with running_gateway(fake, tmp_path, middleware=STRICT, plugins=GUARD, guard="strict") as gw:
        status, _, _ = await post(client, gw, "/v1/chat/completions", CHAT)
    assert (status, fake.count()) == (200, 1)


async def test_a_streamed_call_of_a_key_with_a_policy_is_refused_before_it_opens(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession) -> None:
    async with running_gateway(fake, tmp_path, middleware=STRICT, plugins=GUARD, guard="strict") as gw:
        status, body, _ = await post(client, gw, "/v1/chat/completions", {**SSN, "stream": True})
    assert (status, body["error"]["code"], fake.count()) == (400, "guard_refused", 0)


@pytest.mark.parametrize("middleware", [
    pytest.param({"guard": {}}, id="no-such-policy"),
    pytest.param({"guard": {"enabled": False}}, id="guard-disabled"),
])
async def test_a_key_whose_policy_cannot_be_applied_is_refused_503_unsent(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession, middleware: Mapping[str, Any]) -> None:
    async with running_gateway(fake, tmp_path, middleware=middleware, plugins=GUARD, guard="strict") as gw:
        status, body, headers = await post(client, gw, "/v1/chat/completions", CHAT)
    assert (status, body["error"]["code"], headers["x-should-retry"]) == (503, "guard_policy_unavailable", "false")
    assert body["error"]["message"] == "guard policy 'strict' is not available" and fake.count() == 0


async def test_an_unknown_policy_is_503_in_anthropics_envelope_too(
        fake: FakeProvider, tmp_path: Path, client: aiohttp.ClientSession) -> None:
    body = {"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    async with running_gateway(fake, tmp_path, middleware=STRICT, plugins=GUARD, guard="lenient") as gw:
        status, answer, _ = await post(client, gw, "/v1/messages", body)
    assert (status, answer["error"]["type"]) == (503, "overloaded_error") and fake.count() == 0
    assert answer["error"]["message"] == "guard policy 'lenient' is not available"
