"""The body cap on the happy path: the capped read against the uncapped one it replaced.

Over loopback: ``HttpClient.post_json`` against an uncapped read of the same answer (what
``post_json`` did before bodies were capped: ``await response.read()`` then ``json.loads``),
200 sequential calls per round to FakeProvider. Loopback noise (tens of µs a call) hides a
few µs, so the read and the decode are also timed alone, 1,000 per round, on a small answer
already received. Goal: the cap and strict decoding add under 5 µs per call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp.base_protocol import BaseProtocol

from provmw._transport.reads import read_capped
from provmw.http import HttpClient, decode_json
from provmw.testing import FakeProvider

CALLS = 200
ALONE = 1_000
ANSWER = json.dumps({"id": "c", "model": "m", "choices": [{"index": 0, "finish_reason": "stop", "message": {
    "role": "assistant", "content": "echo: hello there, how are you?"}}],
    "usage": {"prompt_tokens": 6, "completion_tokens": 6, "total_tokens": 12}}).encode()
BODY = {"model": "m", "messages": [{"role": "user", "content": "hello there, how are you?"}]}
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}


@pytest.fixture(scope="module")
def setup() -> Iterator[tuple[asyncio.AbstractEventLoop, HttpClient, str]]:
    loop = asyncio.new_event_loop()
    fake = loop.run_until_complete(FakeProvider().start())
    http = HttpClient()
    yield loop, http, f"{fake.openai_base_url}/chat/completions"
    loop.run_until_complete(http.aclose())
    loop.run_until_complete(fake.stop())
    loop.close()


async def _capped(http: HttpClient, url: str) -> Any:
    return await http.post_json(url, BODY, HEADERS)


async def _uncapped(http: HttpClient, url: str) -> Any:
    async with http.session.post(url, data=json.dumps(BODY).encode(), headers=HEADERS,
                                 allow_redirects=False) as response:
        raw = await response.read()
    return json.loads(raw)


@pytest.mark.parametrize("call", [_capped, _uncapped], ids=["post_json", "uncapped-read"])
def test_small_body_sequential(benchmark: Any, setup: Any, call: Any) -> None:
    loop, http, url = setup

    async def batch() -> None:
        for _ in range(CALLS):
            await call(http, url)

    benchmark.group = f"post_json small body x{CALLS}"
    benchmark(lambda: loop.run_until_complete(batch()))


def _received(loop: asyncio.AbstractEventLoop) -> aiohttp.StreamReader:
    reader = aiohttp.StreamReader(BaseProtocol(loop), 2**16, loop=loop)
    reader.feed_data(ANSWER)
    reader.feed_eof()
    return reader


async def _read_capped(loop: asyncio.AbstractEventLoop) -> bytes:
    return await read_capped(_received(loop), len(ANSWER), 64 * 1024 * 1024)


async def _read_whole(loop: asyncio.AbstractEventLoop) -> bytes:
    return await _received(loop).read()


@pytest.mark.parametrize("read", [_read_capped, _read_whole], ids=["read_capped", "uncapped-read"])
def test_read_alone(benchmark: Any, loop: asyncio.AbstractEventLoop, read: Any) -> None:
    async def batch() -> None:
        for _ in range(ALONE):
            await read(loop)

    benchmark.group = f"read a received answer x{ALONE}"
    benchmark(lambda: loop.run_until_complete(batch()))


@pytest.mark.parametrize("decode", [decode_json, json.loads], ids=["decode_json", "json.loads"])
def test_decode_alone(benchmark: Any, decode: Any) -> None:
    def batch() -> None:
        for _ in range(ALONE):
            decode(ANSWER)

    benchmark.group = f"decode a small answer x{ALONE}"
    benchmark(batch)
