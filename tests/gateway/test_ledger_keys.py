"""A gateway call's ledger rows name its virtual key by its public id and its team, never the key's secret."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from provmw.gateway.ui import ADMIN_TOKEN_ENV
from provmw.stores.usage import SqliteUsageStore, UsageRecord
from provmw.testing import FakeProvider
from tests.gateway.ui_support import ADMIN_TOKEN, chat, priced_gateway


async def ledger(path: Path) -> list[UsageRecord]:
    store = SqliteUsageStore(path)
    found = await store.records()
    await store.aclose()
    return found


async def test_a_gateway_calls_rows_hold_its_key_id_and_team(fake: FakeProvider, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ADMIN_TOKEN_ENV, ADMIN_TOKEN)
    async with priced_gateway(fake, tmp_path, team="search", user="ada") as gw, aiohttp.ClientSession() as client:
        await chat(client, gw, gw.key)
        key_id = gw.record.key_id
    [found] = await ledger(tmp_path / "ledger.sqlite3")
    assert (found.key_id, found.team, found.tenant) == (key_id, "acme/search", "acme")


async def test_no_ledger_file_holds_the_keys_secret(fake: FakeProvider, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ADMIN_TOKEN_ENV, ADMIN_TOKEN)
    async with priced_gateway(fake, tmp_path, team="search") as gw, aiohttp.ClientSession() as client:
        await chat(client, gw, gw.key)
        secret = gw.key.removeprefix(f"pmk_{gw.record.key_id}_").encode()
    assert len(secret) >= 32
    assert holding(secret, tmp_path) == []


def holding(secret: bytes, folder: Path) -> list[str]:
    """The ledger's files in ``folder`` (the database, its WAL, the spill file) that hold ``secret``."""
    files = list(folder.glob("ledger.sqlite3*"))
    assert files
    return [f.name for f in files if secret in f.read_bytes()]
