"""What the /ui tests share: a priced gateway on loopback with an admin token, calls through it with
its keys, and the page's tables read back as text."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from provmw.gateway import SqliteKeyStore
from provmw.gateway.app import gateway_app
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.pools import Pool
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import openai_config
from tests.gateway.test_server import Running

ADMIN_TOKEN = "admin-TOKEN-for-tests-4e1b"
PRICE = {"input_usd_per_mtok": 3.0, "output_usd_per_mtok": 15.0, "max_output_tokens": 100}


@contextlib.asynccontextmanager
async def priced_gateway(fake: FakeProvider, tmp_path: Path, *, middleware: Mapping[str, Any] | None = None,
                         pools: Mapping[str, Pool] | None = None, **create: Any) -> AsyncIterator[Running]:
    """A gateway over ``fake`` (configuration "chat", priced; a global daily budget of $5; ``middleware``
    sections over those) and one key of organisation "acme" made with ``create``; PROVMW_ADMIN_TOKEN is
    the caller's to set first."""
    layers: dict[str, Any] = {"usage": {"path": str(tmp_path / "ledger.sqlite3")},
              "budget": {"path": str(tmp_path / "b.sqlite3"),
                         "limits": [{"scope": "global", "period": "day", "max_cost_usd": 5.0}]}, **(middleware or {})}
    settings = Settings(configurations={"chat": openai_config(fake, identifier="chat", price=PRICE,
                                                              options={"max_tokens": 20})},
                        pools=dict(pools or {}), middleware=layers)
    keys = SqliteKeyStore(tmp_path / "keys.sqlite3")
    whole, record = await keys.create("acme", **create)
    manager = ServiceManager(settings, host=PluginHost(PluginPolicy(autoload=False), environ={}))
    runner = web.AppRunner(gateway_app(manager, keys))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        yield Running(f"http://{host}:{port}", whole, record, keys, fake, manager)
    finally:
        await runner.cleanup()
        await manager.aclose()
        await keys.aclose()


async def chat(client: aiohttp.ClientSession, gw: Running, key: str, text: str = "hi", model: str = "chat") -> None:
    """One chat completion through the gateway with ``key``; it must be answered."""
    async with client.post(f"{gw.url}/v1/chat/completions", headers={"authorization": f"Bearer {key}"},
                           json={"model": model, "messages": [{"role": "user", "content": text}]}) as response:
        assert response.status == 200, await response.text()


async def page(client: aiohttp.ClientSession, gw: Running, token: str | None = ADMIN_TOKEN) -> tuple[int, str]:
    headers = {"authorization": f"Bearer {token}"} if token is not None else {}
    async with client.get(f"{gw.url}/ui", headers=headers) as response:
        return response.status, await response.text()


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._rows: list[list[str]] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attributes: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._rows = self.tables.setdefault(dict(attributes).get("id") or "", [])
        elif tag == "tr" and self._rows is not None:
            self._rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._rows:
            self._rows[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._rows = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def tables(html: str) -> dict[str, list[list[str]]]:
    """Each table of the page by its id: its rows (the header first), each cell's text."""
    parser = _Tables()
    parser.feed(html)
    return parser.tables
