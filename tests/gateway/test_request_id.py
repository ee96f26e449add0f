"""Every endpoint answer names its call (``x-request-id``, ``request-id``): the correlation id of its
ledger rows and traces, the client's own when it sent a plain one."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import aiohttp
import anthropic
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from provmw.testing import FakeProvider
from tests.gateway.test_server import CHAT, running_gateway

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello there"}]


def ledger_correlation_ids(tmp_path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(tmp_path / "ledger.sqlite3")) as db:
        return [row[0] for row in db.execute("SELECT correlation_id FROM usage")]


async def test_the_answers_request_id_is_its_ledger_rows_correlation_id(fake: FakeProvider, tmp_path: Path) -> None:
    async with running_gateway(fake, tmp_path) as gw:
        client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)
        answer = await client.chat.completions.with_raw_response.create(model="chat", messages=HELLO)
    sent = answer.headers["x-request-id"]
    assert answer.request_id == sent and ledger_correlation_ids(tmp_path) == [sent]


async def test_a_clients_plain_request_id_is_kept(fake: FakeProvider, tmp_path: Path) -> None:
    async with running_gateway(fake, tmp_path) as gw, aiohttp.ClientSession() as client, client.post(
            f"{gw.url}/v1/chat/completions", json=CHAT,
            headers={"authorization": f"Bearer {gw.key}", "x-request-id": "trace-42.a:b"}) as response:
        assert response.headers["x-request-id"] == "trace-42.a:b"
    assert ledger_correlation_ids(tmp_path) == ["trace-42.a:b"]


@pytest.mark.parametrize("given", ["", "has space", "x" * 129, "newline\\n", "ümlaut"])
async def test_a_request_id_that_is_no_plain_token_is_replaced(fake: FakeProvider, tmp_path: Path, given: str) -> None:
    async with running_gateway(fake, tmp_path) as gw, aiohttp.ClientSession() as client, client.post(
            f"{gw.url}/v1/chat/completions", json=CHAT,
            headers={"authorization": f"Bearer {gw.key}", "x-request-id": given}) as response:
        assert response.status == 200 and response.headers["x-request-id"] not in ("", given)


async def test_a_refusal_names_its_request_too(fake: FakeProvider, tmp_path: Path) -> None:
    async with running_gateway(fake, tmp_path) as gw:
        client = anthropic.AsyncAnthropic(base_url=gw.url, api_key="pmk_not_a_key", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as refused:
            await client.messages.create(model="claude", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.request_id and refused.value.response.headers["x-request-id"] == refused.value.request_id


async def test_a_stream_names_its_request(fake: FakeProvider, tmp_path: Path) -> None:
    async with running_gateway(fake, tmp_path) as gw:
        client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)
        async with client.chat.completions.with_streaming_response.create(model="chat", messages=HELLO,
                                                                          stream=True) as response:
            async for _ in response.iter_lines():
                pass
    assert ledger_correlation_ids(tmp_path) == [response.headers["x-request-id"]]
