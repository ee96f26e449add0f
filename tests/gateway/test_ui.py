"""GET /ui, the gateway's status page: for the admin token only; the stack, budgets with their fill and the
ledger's spend by organisation, team, user, key and day, every value escaped."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from zoneinfo import ZoneInfo

import aiohttp
import pytest

from provmw.cli.reports import usd
from provmw.gateway.ui import ADMIN_TOKEN_ENV, SPEND_DAYS, SPEND_GROUPS
from provmw.pools import Pool
from provmw.testing import FakeProvider, Fault
from tests.gateway.test_server import Running
from tests.gateway.ui_support import ADMIN_TOKEN, chat, page, priced_gateway, tables


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def gw(fake: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Running]:
    monkeypatch.setenv(ADMIN_TOKEN_ENV, ADMIN_TOKEN)
    async with priced_gateway(fake, tmp_path, team="search", user="ada") as running:
        yield running


async def test_the_page_lists_the_stack_in_order_with_priorities(gw: Running, client: aiohttp.ClientSession) -> None:
    status, html = await page(client, gw)
    assert status == 200
    shown = tables(html)["stack-layers"][1:]
    assert shown == [[str(e.priority), e.name, e.plugin] for e in gw.manager.stack]
    assert "budget" in {row[1] for row in shown}


async def test_a_key_budget_shows_its_fill_after_traffic(gw: Running, client: aiohttp.ClientSession) -> None:
    await gw.keys.set_budget("key", gw.record.key_id, "day", max_requests=4)
    await chat(client, gw, gw.key)
    rows = {row[0]: row for row in tables((await page(client, gw))[1])["budget-buckets"][1:]}
    bucket = rows[f"key:{gw.record.key_id}"]
    assert bucket[2] == "4 requests"
    assert (bucket[6], bucket[7]) == ("1", "25%")


async def test_the_configured_global_budget_shows_the_ledgers_cost(gw: Running, client: aiohttp.ClientSession) -> None:
    await chat(client, gw, gw.key)
    await chat(client, gw, gw.key, "again")
    rows = {row[0]: row for row in tables((await page(client, gw))[1])["budget-buckets"][1:]}
    spent = sum(r.cost_usd or 0.0 for r in await gw.manager.state.usage_journal().store.records())
    assert spent > 0
    assert rows["global:*"][2:5] == ["$5", usd(spent), "$0"]


async def test_spend_by_organisation_team_user_key_and_day_is_the_ledgers(gw: Running,
                                                                         client: aiohttp.ClientSession) -> None:
    await chat(client, gw, gw.key)
    shown = tables((await page(client, gw))[1])
    store, zone = gw.manager.state.usage_journal().store, ZoneInfo("UTC")
    for group, label in SPEND_GROUPS:
        rows = await store.summary(group, zone, time.time() - SPEND_DAYS * 86_400)
        assert [[r[group], str(r["calls"]), usd(r["cost_usd"])] for r in rows] == \
               [[row[0], row[1], row[5]] for row in shown[f"spend-by-{label}"][1:]]
    assert [shown[f"spend-by-{label}"][1][0] for label in ("organisation", "team", "key")] == \
           ["acme", "acme/search", gw.record.key_id]


async def test_a_direct_calls_spend_shows_under_none_by_key_and_team(gw: Running,
                                                                     client: aiohttp.ClientSession) -> None:
    await chat(client, gw, gw.key)
    await gw.manager.chat("from the host itself", configuration="chat")
    shown = tables((await page(client, gw))[1])
    assert [row[:2] for row in shown["spend-by-key"][1:]] == [["(none)", "1"], [gw.record.key_id, "1"]]
    assert [row[:2] for row in shown["spend-by-team"][1:]] == [["(none)", "1"], ["acme/search", "1"]]


async def test_without_the_admin_token_the_page_is_401(gw: Running, client: aiohttp.ClientSession) -> None:
    status, text = await page(client, gw, token=None)
    assert status == 401
    assert "acme" not in text


async def test_a_virtual_key_is_not_an_admin_token(gw: Running, client: aiohttp.ClientSession) -> None:
    assert (await page(client, gw, token=gw.key))[0] == 401
    assert (await page(client, gw, token=ADMIN_TOKEN + "x"))[0] == 401


async def test_with_no_admin_token_configured_the_page_is_404(fake: FakeProvider, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               client: aiohttp.ClientSession) -> None:
    monkeypatch.delenv(ADMIN_TOKEN_ENV, raising=False)
    async with priced_gateway(fake, tmp_path) as gw:
        assert (await page(client, gw))[0] == 404


async def test_a_team_named_script_shows_as_text(fake: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 client: aiohttp.ClientSession) -> None:
    monkeypatch.setenv(ADMIN_TOKEN_ENV, ADMIN_TOKEN)
    async with priced_gateway(fake, tmp_path, team="<script>", user='"><b>') as gw:
        await gw.keys.set_budget("team", "acme/<script>", "day", max_requests=10)
        await chat(client, gw, gw.key)
        html = (await page(client, gw))[1]
    assert "<script>" not in html and "<b>" not in html
    assert "team:acme/&lt;script&gt;" in html
    assert [r[0] for r in tables(html)["budget-buckets"][1:] if r[0].startswith("team:")] == ["team:acme/<script>"]
    assert [r[0] for r in tables(html)["spend-by-team"][1:]] == ["acme/<script>"]


async def test_the_page_allows_no_script_to_run(gw: Running, client: aiohttp.ClientSession) -> None:
    async with client.get(f"{gw.url}/ui", headers={"authorization": f"Bearer {ADMIN_TOKEN}"}) as response:
        assert response.headers["content-type"] == "text/html; charset=utf-8"
        assert response.headers["content-security-policy"].startswith("default-src 'none'")
        assert response.headers["cache-control"] == "no-store"


async def test_a_deployment_whose_breaker_opened_shows_open(fake: FakeProvider, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             client: aiohttp.ClientSession) -> None:
    monkeypatch.setenv(ADMIN_TOKEN_ENV, ADMIN_TOKEN)
    layers = {"circuit_breaker": {"window_size": 2, "min_calls": 2}, "retry": {"enabled": False}}
    async with priced_gateway(fake, tmp_path, middleware=layers) as gw:
        assert tables((await page(client, gw))[1])["deployment-states"][1][5] == "closed"
        fake.script(Fault(status=500), Fault(status=500))
        for _ in range(2):
            async with client.post(f"{gw.url}/v1/chat/completions", headers={"authorization": f"Bearer {gw.key}"},
                                   json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]}):
                pass
        assert tables((await page(client, gw))[1])["deployment-states"][1] == \
               ["chat", "openai", "gpt-test", "-", "yes", "open"]


async def test_a_pool_shows_its_strategy_and_each_deployments_load(fake: FakeProvider, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    client: aiohttp.ClientSession) -> None:
    monkeypatch.setenv(ADMIN_TOKEN_ENV, ADMIN_TOKEN)
    pool = Pool(name="gpt", members=("chat",), strategy="order")
    async with priced_gateway(fake, tmp_path, pools={"gpt": pool}) as gw:
        await chat(client, gw, gw.key, model="gpt")
        shown = tables((await page(client, gw))[1])
    assert shown["pools"][1][:3] == ["gpt", "order", "chat"]
    assert shown["pool-loads"][1:] == [["gpt", "chat", "0", "0"]]
    assert shown["deployment-states"][1][3] == "gpt"


async def test_a_key_store_that_fails_leaves_its_parts_unavailable_not_the_page(gw: Running,
                                                                              client: aiohttp.ClientSession) -> None:
    await chat(client, gw, gw.key)
    await gw.keys.aclose()  # the key store no longer answers
    status, html = await page(client, gw)
    assert status == 200
    assert html.count("Unavailable: the store did not answer") == 1  # the keys
    assert "The key store did not answer" in html
    assert {"stack-layers", "budget-buckets", "spend-by-user"} <= set(tables(html))


async def test_metrics_answer_only_the_admin_token_when_one_is_set(gw: Running, client: aiohttp.ClientSession) -> None:
    async with client.get(f"{gw.url}/metrics") as anonymous, client.get(
            f"{gw.url}/metrics", headers={"authorization": f"Bearer {gw.key}"}) as keyed, client.get(
            f"{gw.url}/metrics", headers={"authorization": f"Bearer {ADMIN_TOKEN}"}) as admin:
        assert (anonymous.status, keyed.status, admin.status) == (401, 401, 200)
        assert "provmw_gateway" in await admin.text()
