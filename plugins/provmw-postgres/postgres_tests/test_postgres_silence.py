"""A PostgreSQL that accepts and never answers: calls go on, their records spill, and the ledger gets them after.

PostgreSQL sits behind a proxy the test switches (``proxy.py``); the store's own bounds
(``write_timeout_s``, ``connect_timeout_s``) are what turn the silence into an outage the
journal handles. The ``asyncio.timeout`` below only stops a test that would otherwise hang.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from postgres_tests.conftest import rows
from postgres_tests.fleet_worker import host
from postgres_tests.proxy import TcpProxy
from provmw.manager import ServiceManager
from provmw.settings import parse_settings
from provmw.testing import FakeProvider

pytestmark = pytest.mark.postgres

SILENT_CALLS = 5
HANG_GUARD_S = 60.0


@pytest.fixture
async def proxy(postgres_url: str) -> AsyncIterator[TcpProxy]:
    async with TcpProxy() as running:
        yield running


def manager(fake: FakeProvider, proxy: TcpProxy, schema: str, folder: Path) -> ServiceManager:
    usage = {"store": proxy.url(), "schema": schema, "path": str(folder / "ledger"),
             "write_timeout_s": 0.5, "connect_timeout_s": 0.5}
    document: dict[str, Any] = {
        "default": "main",
        "configurations": {"main": {"provider": "openai", "model": "m", "base_url": fake.openai_base_url}},
        "middleware": {"usage": usage, "retry": {"max_attempts": 1}},
    }
    return ServiceManager(parse_settings(document, "<test>", {}), host=host())


async def through_a_silence(m: ServiceManager, proxy: TcpProxy) -> None:
    """One call while PostgreSQL answers, then ``SILENT_CALLS`` while it is silent."""
    await m.chat("hello", correlation_id="before")
    await proxy.switch("silent")
    async with asyncio.timeout(HANG_GUARD_S):
        for i in range(SILENT_CALLS):
            await m.chat("hello", correlation_id=f"silent-{i}")


def spilled(folder: Path) -> list[str]:
    lines = (folder / "ledger.spill").read_text().splitlines()
    return sorted(json.loads(line)["correlation_id"] for line in lines)


async def test_calls_return_while_postgresql_is_silent_and_their_records_spill(
        fake: FakeProvider, proxy: TcpProxy, schema: str, tmp_path: Path) -> None:
    async with manager(fake, proxy, schema, tmp_path) as m:
        await through_a_silence(m, proxy)
        assert spilled(tmp_path) == [f"silent-{i}" for i in range(SILENT_CALLS)]
        await proxy.switch("forward")


async def test_the_ledger_gets_the_silent_calls_records_once_postgresql_answers_again(
        fake: FakeProvider, proxy: TcpProxy, schema: str, postgres_url: str, tmp_path: Path) -> None:
    async with manager(fake, proxy, schema, tmp_path) as m:
        await through_a_silence(m, proxy)
        await proxy.switch("forward")
        async with asyncio.timeout(HANG_GUARD_S):
            await m.state.usage_journal().recovered()
    found = rows(postgres_url, schema, "SELECT correlation_id FROM {table} ORDER BY correlation_id")
    assert [r[0] for r in found] == ["before", *(f"silent-{i}" for i in range(SILENT_CALLS))]
    assert not (tmp_path / "ledger.spill").exists()


async def test_calls_return_while_postgresql_refuses_and_the_ledger_gets_their_records_after(
        fake: FakeProvider, proxy: TcpProxy, schema: str, postgres_url: str, tmp_path: Path) -> None:
    async with manager(fake, proxy, schema, tmp_path) as m:
        await m.chat("hello", correlation_id="before")
        await proxy.switch("refuse")  # the open connection is cut, new ones are refused
        async with asyncio.timeout(HANG_GUARD_S):
            await m.chat("hello", correlation_id="refused")
            assert spilled(tmp_path) == ["refused"]
            await proxy.switch("forward")
            await m.state.usage_journal().recovered()
    found = rows(postgres_url, schema, "SELECT correlation_id FROM {table} ORDER BY correlation_id")
    assert [r[0] for r in found] == ["before", "refused"]
