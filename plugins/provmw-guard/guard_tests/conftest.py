"""A fake provider (whose split wire streams its answer cut every few characters), a plugin host
that loads only the guard, a manager factory, and a loopback check endpoint with scripted answers."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest
from aiohttp import web

from provmw.config import ProviderConfig
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import Settings
from provmw.testing import FakeProvider, OpenAIWire, sse
from provmw.testing.wires import openai_chat


class SplitWire(OpenAIWire):
    """OpenAI's chat wire at ``/split/v1``, streaming the answer in pieces of N characters
    (the model ``split-N``), so that a placeholder arrives cut at every point."""

    routes: Mapping[str, str] = {"split_chat": "/split/v1/chat/completions"}

    def answer(self, route: str, body: Mapping[str, Any], count: Any) -> dict[str, Any]:
        return openai_chat(body, count)

    def frames(self, route: str, body: Mapping[str, Any], payload: Mapping[str, Any]) -> list[bytes]:
        size = int(str(body.get("model", "split-1")).rsplit("-", 1)[1])
        text = payload["choices"][0]["message"]["content"] or ""
        head = {"id": "split", "object": "chat.completion.chunk", "created": 0, "model": body.get("model")}
        deltas = [{"content": text[i:i + size]} for i in range(0, len(text), size)]
        events = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
        events.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        events.append({**head, "choices": [], "usage": payload["usage"]})
        return [sse(json.dumps(e)) for e in events] + [sse("[DONE]")]


@pytest.fixture
async def fake() -> AsyncIterator[FakeProvider]:
    async with FakeProvider(wires=[SplitWire()]) as server:
        yield server


@pytest.fixture
def host() -> PluginHost:
    return PluginHost(PluginPolicy(allow=("guard",)), environ={})


def config(fake: FakeProvider, identifier: str = "main", model: str = "gpt-test", **fields: Any) -> ProviderConfig:
    base_url = f"{fake.url}/split/v1" if model.startswith("split-") else fake.openai_base_url
    return ProviderConfig(identifier=identifier, provider="openai", model=model, base_url=base_url,
                          api_key="sk-test", **fields)


Manager = Callable[..., ServiceManager]


@pytest.fixture
def manager(fake: FakeProvider, host: PluginHost) -> Manager:
    """``manager(guard={...settings...}, model="split-3")``: a manager on the fake with the guard loaded."""

    def build(guard: Mapping[str, Any] | None = None, middleware: Mapping[str, Any] | None = None,
              **fields: Any) -> ServiceManager:
        settings = Settings(configurations={"main": config(fake, **fields)}, default="main",
                            middleware={"guard": dict(guard or {}), **(middleware or {})})
        return ServiceManager(settings, host=host)

    return build


class CheckServer:
    """A loopback moderation and judging endpoint: ``answer`` is the JSON it sends (``None``: it
    holds the request until the test ends), ``status`` its HTTP status; ``bodies`` what it was sent."""

    def __init__(self) -> None:
        self.answer: Any = {"results": [{"flagged": False, "categories": {}}]}
        self.status = 200
        self.bodies: list[Any] = []
        self.headers: list[Mapping[str, str]] = []
        self._release = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> CheckServer:
        app = web.Application()
        app.router.add_post("/v1/moderations", self._handle)
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"
        return self

    async def stop(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        self.headers.append(dict(request.headers))
        if self.answer is None:
            await self._release.wait()
        if isinstance(self.answer, str):
            return web.Response(text=self.answer, status=self.status, content_type="application/json")
        return web.json_response(self.answer, status=self.status)


@pytest.fixture
async def check_server() -> AsyncIterator[CheckServer]:
    server = await CheckServer().start()
    yield server
    await server.stop()


@pytest.fixture
def closed_port_url() -> str:
    """The URL of a loopback port nothing listens on: connecting is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
