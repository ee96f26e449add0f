"""A hostile client's review of the gateway: each test shows one bug, marked xfail until it is fixed."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import openai
import pytest

from provmw.errors import ConfigurationError
from provmw.gateway.app import GatewayOptions
from provmw.testing import FakeProvider, Fault
from tests.gateway.test_server import CHAT, Running, running_gateway


def _ledger_rows(folder: Path) -> list[tuple[str | None, str | None]]:
    with sqlite3.connect(folder / "ledger.sqlite3") as ledger:
        return list(ledger.execute("SELECT status, user FROM usage"))


async def _post(gw: Running, path: str, body: bytes | Mapping[str, Any]) -> tuple[int, str]:
    headers = {"authorization": f"Bearer {gw.key}", "content-type": "application/json"}
    async with aiohttp.ClientSession() as client:
        sent = {"data": body} if isinstance(body, bytes) else {"json": body}
        async with client.post(f"{gw.url}{path}", headers=headers, **sent) as response:
            return response.status, await response.text()


async def test_a_deeply_nested_body_is_400_not_an_internal_error(fake: FakeProvider, tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    async with running_gateway(fake, tmp_path) as gw:
        status, _ = await _post(gw, "/v1/chat/completions", b"[" * 100_000 + b"]" * 100_000)
    # The gateway's and aiohttp's own records: another test's unclosed SDK client may log at ERROR meanwhile.
    assert status == 400 and not [r for r in caplog.records if r.levelno >= logging.ERROR
                                  and r.name.startswith(("provmw", "aiohttp"))]


async def test_a_stored_response_cannot_be_continued_by_another_organisation(fake: FakeProvider,
                                                                             tmp_path: Path) -> None:
    async with running_gateway(fake, tmp_path) as gw:
        other, _ = await gw.keys.create("globex")
        acme = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)
        globex = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=other, max_retries=0)
        stored = await acme.responses.create(model="chat", input="acme's plan", store=True)
        with pytest.raises(openai.APIStatusError):
            await globex.responses.create(model="chat", input="what was it?", previous_response_id=stored.id)
    assert fake.count() == 1


async def test_a_keys_guard_policy_is_enforced_or_the_call_refused(fake: FakeProvider, tmp_path: Path) -> None:
    async with running_gateway(fake, tmp_path, guard="strict") as gw:
        status, _ = await _post(gw, "/v1/chat/completions", CHAT)
    assert status != 200 and fake.count() == 0


async def test_a_per_user_budget_is_not_escaped_by_naming_another_user(fake: FakeProvider, tmp_path: Path) -> None:
    limits = [{"scope": "user", "match": "*", "period": "day", "max_requests": 1}]
    budget = {"budget": {"path": str(tmp_path / "b.sqlite3"), "limits": limits}}
    async with running_gateway(fake, tmp_path, middleware=budget) as gw:
        statuses = [(await _post(gw, "/v1/chat/completions", {**CHAT, "user": f"u{i}"}))[0] for i in range(3)]
    assert statuses.count(200) == 1 and fake.count() == 1


async def test_a_client_chosen_user_cannot_cost_the_ledger_its_row(fake: FakeProvider, tmp_path: Path) -> None:
    async with running_gateway(fake, tmp_path) as gw:
        body = b'{"model": "chat", "user": "\\ud800", "messages": [{"role": "user", "content": "hi"}]}'
        status, _ = await _post(gw, "/v1/chat/completions", body)
    assert status != 200 or len(_ledger_rows(tmp_path)) == fake.count() == 1


async def test_a_client_chosen_user_is_bounded_before_the_ledger(fake: FakeProvider, tmp_path: Path) -> None:
    async with running_gateway(fake, tmp_path) as gw:
        await _post(gw, "/v1/chat/completions", {**CHAT, "user": "u" * 1_000_000})
    assert all(len(user or "") <= 1024 for _, user in _ledger_rows(tmp_path))


async def test_an_upstream_404_does_not_show_the_operators_base_url(fake: FakeProvider, tmp_path: Path) -> None:
    fake.script(Fault(status=404, message="no such model"))
    async with running_gateway(fake, tmp_path, middleware={"retry": {"enabled": False}}) as gw:
        _, text = await _post(gw, "/v1/chat/completions", CHAT)
    assert fake.url not in text and "gpt-test" not in text


async def test_a_local_rate_limit_is_not_blamed_on_the_upstream(fake: FakeProvider, tmp_path: Path) -> None:
    limit = {"rate_limit": {"max_wait_s": 0, "limits": {"chat": {"requests_per_minute": 1}}}}
    async with running_gateway(fake, tmp_path, middleware=limit) as gw:
        await _post(gw, "/v1/chat/completions", CHAT)
        status, text = await _post(gw, "/v1/chat/completions", CHAT)
    assert status == 429 and "upstream" not in text and "gpt-test" not in text


async def test_a_key_store_outage_is_503_not_an_internal_error(fake: FakeProvider, tmp_path: Path) -> None:
    async with running_gateway(fake, tmp_path) as gw:
        await gw.keys.aclose()  # the key was never verified: nothing cached
        status, _ = await _post(gw, "/v1/chat/completions", CHAT)
    assert status == 503


_HI = {"role": "user", "content": "hi"}
_MALFORMED = [
    ("/v1/messages", {"model": "claude", "max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "image", "source": 5}]}]}),
    ("/v1/messages", {"model": "claude", "max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": 5}}]}]}),
    ("/v1/messages", {"model": "claude", "max_tokens": 5, "messages": [_HI], "tools": [5]}),
    ("/v1/messages", {"model": "claude", "max_tokens": 5, "messages": [_HI], "tools": {"a": 1}}),
    ("/v1/chat/completions", {"model": "chat", "messages": [_HI],
                              "response_format": {"type": "json_schema", "json_schema": 5}}),
]


@pytest.mark.parametrize(("path", "body"), _MALFORMED, ids=["image-source", "image-data", "tool-item", "tools-map",
                                                           "json-schema"])
async def test_a_malformed_field_is_400_not_an_internal_error(fake: FakeProvider, tmp_path: Path, path: str,
                                                              body: dict[str, Any]) -> None:
    async with running_gateway(fake, tmp_path) as gw:
        status, _ = await _post(gw, path, body)
    assert status == 400


async def test_a_shared_budget_refusal_shows_no_other_tenants_spend(fake: FakeProvider, tmp_path: Path) -> None:
    limits = [{"scope": "global", "period": "month", "max_requests": 1}]
    async with running_gateway(fake, tmp_path, middleware={"budget": {"path": str(tmp_path / "b.sqlite3"),
                                                                       "limits": limits}}) as gw:
        await _post(gw, "/v1/chat/completions", CHAT)  # acme spends the shared bucket
        gw = attrs.evolve(gw, key=(await gw.keys.create("globex"))[0])
        status, text = await _post(gw, "/v1/chat/completions", CHAT)
    assert status == 429 and "spent 1" not in text and "limit 1" not in text


async def test_two_organisations_teams_never_share_a_bucket_through_a_slash(fake: FakeProvider,
                                                                           tmp_path: Path) -> None:
    # Organisation 'a/b' team 'c' and organisation 'a' team 'b/c' would be one bucket 'team:a/b/c': such
    # names are refused when the key is made (ADR 0055), so no two such keys exist.
    async with running_gateway(fake, tmp_path) as gw:
        for organisation, team, field in (("a/b", "c", "organisation"), ("a", "b/c", "team")):
            with pytest.raises(ConfigurationError, match=f"^{field}: "):
                await gw.keys.create(organisation, team=team)
    assert fake.count() == 0


@pytest.mark.parametrize("limits", [{"max_body_bytes": 0}, {"max_body_bytes": -1}, {"max_concurrent_per_key": 0}],
                         ids=["body-0", "body-negative", "concurrency-0"])
def test_gateway_options_refuse_limits_that_disable_or_block_everything(limits: dict[str, int]) -> None:
    with pytest.raises(ConfigurationError):
        GatewayOptions(**limits)  # type: ignore[arg-type]


async def test_a_key_in_a_header_too_long_to_parse_is_not_logged(fake: FakeProvider, tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    # aiohttp's parser quotes the head of a header line it refuses; this one starts with the whole key
    async with running_gateway(fake, tmp_path) as gw, aiohttp.ClientSession() as client, client.post(
            f"{gw.url}/v1/chat/completions", json={},
            headers={"authorization": f"Bearer {gw.key}{'x' * 20_000}"}) as response:
        assert response.status == 400
    secret = gw.key[len("pmk_0123456789ab_"):]
    logged = [r for r in caplog.records if secret in r.getMessage() or secret in (r.exc_text or "")]
    assert caplog.records and not logged
    assert fake.count() == 0
