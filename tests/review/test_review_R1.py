"""Review (issue 38): what the admin API and the SQLite key store refuse, rather than failing on it as
if the key store were down (a 503 an SDK or a script retries, for a request that can never succeed)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from provmw.errors import ConfigurationError
from provmw.gateway import SqliteKeyStore
from provmw.gateway.ui import ADMIN_TOKEN_ENV
from provmw.testing import FakeProvider
from tests.gateway.test_admin import TOKEN, admin
from tests.gateway.test_server import Running, running_gateway

NOT_A_KEY_ID = "\ud800"  # a lone surrogate: JSON can carry it, no store can encode it


@pytest.fixture
async def gw(fake: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Running]:
    monkeypatch.setenv(ADMIN_TOKEN_ENV, TOKEN)
    async with running_gateway(fake, tmp_path) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.mark.parametrize(("body", "field"), [
    ({"organisation": "acme", "name": "\ud800"}, "name"),
    ({"organisation": "acme", "name": "build\x00bot"}, "name"),  # PostgreSQL text holds no NUL
    ({"organisation": "acme", "models": ["\ud800"]}, "models"),
    ({"organisation": "acme", "models": ["chat\x00"]}, "models"),
])
async def test_a_name_or_model_no_store_can_hold_is_400_naming_it(gw: Running, client: aiohttp.ClientSession,
                                                                  body: dict[str, Any], field: str) -> None:
    status, answer, _ = await admin(client, gw, "POST", "/admin/keys", body)
    assert (status, answer["error"]["param"]) == (400, field)
    assert len(await gw.keys.list()) == 1


async def test_a_key_budget_for_an_id_no_store_can_hold_is_404(gw: Running, client: aiohttp.ClientSession) -> None:
    status, answer, _ = await admin(client, gw, "PUT", "/admin/budgets", {
        "scope": "key", "subject": NOT_A_KEY_ID, "period": "day", "max_requests": 1})
    assert (status, answer["error"]["code"]) == (404, "key_not_found")


async def test_the_sqlite_store_knows_no_key_by_an_id_it_cannot_hold(tmp_path: Path) -> None:
    store = SqliteKeyStore(tmp_path / "keys.sqlite3")
    assert await store.get(NOT_A_KEY_ID) is None
    with pytest.raises(ConfigurationError, match="no virtual key"):
        await store.disable(NOT_A_KEY_ID)
    await store.aclose()
