"""A key's budgets, from the key store, bind a ServiceManager call made with its principal (ADR 0055)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from provmw.context import Principal
from provmw.errors import BudgetExceededError
from provmw.gateway import KeyRecord, SqliteKeyStore
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import openai_config

PRICE = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 1.0, "max_output_tokens": 100}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteKeyStore]:
    keys = SqliteKeyStore(tmp_path / "provmw-keys.sqlite3")
    yield keys
    await keys.aclose()


def manager(fake: FakeProvider, host: PluginHost, tmp_path: Path) -> ServiceManager:
    config = openai_config(fake, price=PRICE, options={"max_tokens": 10})
    return ServiceManager(Settings(configurations={"oa": config}, middleware={
        "budget": {"path": str(tmp_path / "budgets.sqlite3")}}), host=host)


async def principal(store: SqliteKeyStore, record: KeyRecord) -> Principal:
    return record.principal(await store.budgets_for(record))


async def test_a_key_budget_of_one_request_refuses_the_second(fake: FakeProvider, builtin_only: PluginHost,
                                                              store: SqliteKeyStore, tmp_path: Path) -> None:
    _, record = await store.create("acme", team="search")
    await store.set_budget("key", record.key_id, "day", max_requests=1)
    async with manager(fake, builtin_only, tmp_path) as m:
        await m.chat("hi", principal=await principal(store, record))
        with pytest.raises(BudgetExceededError, match=f"key:{record.key_id}"):
            await m.chat("again", principal=await principal(store, record))
    assert fake.count() == 1


async def test_the_strictest_of_key_team_and_organisation_binds(fake: FakeProvider, builtin_only: PluginHost,
                                                                store: SqliteKeyStore, tmp_path: Path) -> None:
    _, first = await store.create("acme", team="search")
    _, second = await store.create("acme", team="search")
    await store.set_budget("key", first.key_id, "total", max_requests=10)
    await store.set_budget("team", "acme/search", "total", max_requests=2)
    await store.set_budget("organisation", "acme", "total", max_requests=10)
    async with manager(fake, builtin_only, tmp_path) as m:
        await m.chat("a", principal=await principal(store, first))
        await m.chat("b", principal=first.principal(await store.budgets_for(first)))  # the record's shortcut
        with pytest.raises(BudgetExceededError, match="team:acme/search"):
            await m.chat("c", principal=await principal(store, second))
    assert fake.count() == 2


async def test_a_user_budget_binds_every_key_of_the_user(fake: FakeProvider, builtin_only: PluginHost,
                                                         store: SqliteKeyStore, tmp_path: Path) -> None:
    _, laptop = await store.create("acme", user="grace")
    _, agent = await store.create("acme", user="grace")
    await store.set_budget("user", "acme/grace", "total", max_requests=1)
    async with manager(fake, builtin_only, tmp_path) as m:
        await m.chat("a", principal=await principal(store, laptop))
        with pytest.raises(BudgetExceededError, match="user:acme/grace"):
            await m.chat("b", principal=await principal(store, agent))
    assert fake.count() == 1
