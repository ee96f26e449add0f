"""PostgreSQL refused and the spill folder unwritable: no call returns without its record.

Under ``fail_closed`` a call that was answered waits until its record is durable, and new calls
are refused before they are sent; once PostgreSQL answers again the held record reaches it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from postgres_tests.conftest import rows
from postgres_tests.fleet_worker import host
from postgres_tests.proxy import TcpProxy
from provmw.errors import UsageLedgerUnavailableError
from provmw.manager import ServiceManager
from provmw.settings import parse_settings
from provmw.testing import FakeProvider

pytestmark = pytest.mark.postgres

HANG_GUARD_S = 60.0


@pytest.fixture
async def proxy(postgres_url: str) -> AsyncIterator[TcpProxy]:
    async with TcpProxy() as running:
        yield running


def manager(fake: FakeProvider, proxy: TcpProxy, schema: str, folder: Path, policy: str) -> ServiceManager:
    usage = {"store": proxy.url(), "schema": schema, "path": str(folder / "gone" / "ledger"),
             "write_timeout_s": 0.5, "connect_timeout_s": 0.5, "failure_policy": policy}
    document: dict[str, Any] = {
        "default": "main",
        "configurations": {"main": {"provider": "openai", "model": "m", "base_url": fake.openai_base_url}},
        "middleware": {"usage": usage, "retry": {"max_attempts": 1}},
    }
    return ServiceManager(parse_settings(document, "<test>", {}), host=host())


async def until_held(m: ServiceManager) -> None:
    for _ in range(1000):
        if m.state.usage_journal().held:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the record was never held")


async def test_fail_closed_answers_only_once_the_record_is_in_postgresql_and_refuses_meanwhile(
        fake: FakeProvider, proxy: TcpProxy, schema: str, postgres_url: str, tmp_path: Path) -> None:
    async with manager(fake, proxy, schema, tmp_path, "fail_closed") as m, asyncio.timeout(HANG_GUARD_S):
        await m.chat("hello", correlation_id="before")
        await proxy.switch("refuse")
        answered = asyncio.create_task(m.chat("hello", correlation_id="held"))
        await until_held(m)
        with pytest.raises(UsageLedgerUnavailableError):
            await m.chat("hello", correlation_id="refused")
        assert (answered.done(), fake.count()) == (False, 2)
        await proxy.switch("forward")
        await answered
    found = rows(postgres_url, schema, "SELECT correlation_id FROM {table} ORDER BY correlation_id")
    assert [r[0] for r in found] == ["before", "held"]


async def test_fail_open_goes_on_and_postgresql_gets_every_record_after(
        fake: FakeProvider, proxy: TcpProxy, schema: str, postgres_url: str, tmp_path: Path) -> None:
    async with manager(fake, proxy, schema, tmp_path, "fail_open") as m, asyncio.timeout(HANG_GUARD_S):
        await proxy.switch("refuse")
        for i in range(40):
            await m.chat("hello", correlation_id=f"c{i:02}")
        await proxy.switch("forward")
        await m.state.usage_journal().recovered()
        await m.state.usage_journal().flush()
    found = rows(postgres_url, schema, "SELECT correlation_id FROM {table} ORDER BY correlation_id")
    assert [r[0] for r in found] == [f"c{i:02}" for i in range(40)]
