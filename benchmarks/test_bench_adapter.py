"""The OpenAI adapter against a bare aiohttp POST of the same body, both to FakeProvider.

Sequential: 200 calls per round; concurrent: 50 calls gathered per round. Goal: the
adapter adds at most 10% to the bare call's time per request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from provmw.config import ProviderConfig
from provmw.http import HttpClient
from provmw.messages import Message
from provmw.providers.openai import OpenAIAdapter
from provmw.requests import ChatRequest
from provmw.testing import FakeProvider

SEQUENTIAL = 200
CONCURRENT = 50
REQUEST = ChatRequest((Message.system("be brief"), Message.user("hello there, how are you?")))


@pytest.fixture(scope="module")
def setup() -> Iterator[tuple[asyncio.AbstractEventLoop, HttpClient, ProviderConfig]]:
    loop = asyncio.new_event_loop()
    fake = loop.run_until_complete(FakeProvider().start())
    http = HttpClient()
    config = ProviderConfig(identifier="b", provider="openai", model="m", base_url=fake.openai_base_url,
                            api_key="sk-bench")
    yield loop, http, config
    loop.run_until_complete(http.aclose())
    loop.run_until_complete(fake.stop())
    loop.close()


def _adapter_call(http: HttpClient, config: ProviderConfig) -> Any:
    return OpenAIAdapter().chat(http, config, REQUEST)


async def _bare_call(http: HttpClient, config: ProviderConfig) -> Any:
    body = OpenAIAdapter().chat_body(config, REQUEST)
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}
    async with http.session.post(f"{config.base_url}/chat/completions", data=json.dumps(body).encode(),
                                 headers=headers) as response:
        return json.loads(await response.read())


def _sequential(loop: asyncio.AbstractEventLoop, call: Any, http: HttpClient, config: ProviderConfig) -> Any:
    async def batch() -> None:
        for _ in range(SEQUENTIAL):
            await call(http, config)

    return lambda: loop.run_until_complete(batch())


def _concurrent(loop: asyncio.AbstractEventLoop, call: Any, http: HttpClient, config: ProviderConfig) -> Any:
    async def batch() -> None:
        await asyncio.gather(*(call(http, config) for _ in range(CONCURRENT)))

    return lambda: loop.run_until_complete(batch())


@pytest.mark.parametrize("call", [_adapter_call, _bare_call], ids=["adapter", "bare-aiohttp"])
def test_sequential(benchmark: Any, setup: Any, call: Any) -> None:
    benchmark.group = "chat sequential x200"
    benchmark(_sequential(setup[0], call, setup[1], setup[2]))


@pytest.mark.parametrize("call", [_adapter_call, _bare_call], ids=["adapter", "bare-aiohttp"])
def test_concurrent(benchmark: Any, setup: Any, call: Any) -> None:
    benchmark.group = "chat concurrent x50"
    benchmark(_concurrent(setup[0], call, setup[1], setup[2]))
