"""GET /ui in a real headless Chromium (Debian's ``chromium`` package, driven by playwright): after traffic
with two keys, the page shows the budgets and the spend the ledger holds, by organisation, team, user and key.

Playwright's own browser download (``playwright install``) is never used: the system's Chromium is.
Without Chromium or playwright the test skips with the reason; under CI it fails instead.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import pytest

from provmw.ci import service_missing
from provmw.gateway.ui import ADMIN_TOKEN_ENV, SPEND_DAYS
from provmw.testing import FakeProvider
from tests.gateway.test_server import Running
from tests.gateway.ui_support import ADMIN_TOKEN, chat, priced_gateway

pytestmark = pytest.mark.slow


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """A headless Chromium, the system's own."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        service_missing("playwright is not installed (.venv/bin/pip install playwright; the dev extra has it)")
    executable = shutil.which("chromium")
    if executable is None:
        service_missing("Debian's chromium is not installed (apt-get install -y chromium)")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        await launched.close()


async def rows_of(page: Any, anchor: str) -> dict[str, list[str]]:
    """A table's body rows as the browser shows them, by their first cell."""
    rows = [await row.locator("td").all_inner_texts() for row in await page.locator(f"#{anchor} tbody tr").all()]
    return {row[0]: row for row in rows}


def dollars(shown: str) -> float:
    assert shown.startswith("$"), shown
    return float(shown[1:])


async def traffic(gw: Running) -> str:
    """Three calls with the gateway's key (team "search", user "ada") and two with a second key (team "ads",
    user "bob"), each team with a daily budget; the second key's id."""
    second, record = await gw.keys.create("acme", team="ads", user="bob")
    await gw.keys.set_budget("team", "acme/search", "day", max_cost_usd=1.0)
    await gw.keys.set_budget("team", "acme/ads", "day", max_cost_usd=1.0)
    async with aiohttp.ClientSession() as client:
        for n in range(3):
            await chat(client, gw, gw.key, f"question {n}")
        for n in range(2):
            await chat(client, gw, second, f"other {n}")
    return record.key_id


async def test_the_page_in_chromium_shows_the_ledgers_budgets_and_spend(
        fake: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, browser: Any) -> None:
    monkeypatch.setenv(ADMIN_TOKEN_ENV, ADMIN_TOKEN)
    async with priced_gateway(fake, tmp_path, team="search", user="ada") as gw:
        second = await traffic(gw)
        context = await browser.new_context(extra_http_headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
        page = await context.new_page()
        assert (await page.goto(f"{gw.url}/ui")).status == 200
        budgets, by_user = await rows_of(page, "budget-buckets"), await rows_of(page, "spend-by-user")
        by_organisation = await rows_of(page, "spend-by-organisation")
        by_team, by_key = await rows_of(page, "spend-by-team"), await rows_of(page, "spend-by-key")
        records = await gw.manager.state.usage_journal().store.records()
        ledger = await gw.manager.state.usage_journal().store.summary("user", ZoneInfo("UTC"),
                                                                      time.time() - SPEND_DAYS * 86_400)
        await context.close()
    cost = {user: sum(r.cost_usd or 0.0 for r in records if r.user == f"acme/{user}") for user in ("ada", "bob")}
    assert all(cost.values()) and len(records) == 5
    for user, team, key, calls in (("ada", "search", gw.record.key_id, "3"), ("bob", "ads", second, "2")):
        assert dollars(budgets[f"team:acme/{team}"][3]) == pytest.approx(cost[user], abs=5e-6)
        assert dollars(by_user[f"acme/{user}"][5]) == pytest.approx(cost[user], abs=1e-6)
        assert dollars(by_team[f"acme/{team}"][5]) == pytest.approx(cost[user], abs=1e-6)
        assert by_key[key][1] == calls
        assert dollars(by_key[key][5]) == pytest.approx(cost[user], abs=1e-6)
    assert [(r["user"], str(r["calls"])) for r in ledger] == [(u, by_user[u][1]) for u in ("acme/ada", "acme/bob")]
    assert dollars(budgets["global:*"][3]) == pytest.approx(sum(cost.values()), abs=5e-6)
    assert dollars(by_organisation["acme"][5]) == pytest.approx(sum(cost.values()), abs=1e-6)
