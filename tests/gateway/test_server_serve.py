"""``provmw serve`` as a subprocess on a free port: it answers, and SIGTERM lets a stream in flight finish."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import attrs
import pytest

from provmw.gateway import SqliteKeyStore
from provmw.testing import FakeProvider, Fault

CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hello there"}]}


@attrs.frozen
class Served:
    url: str
    key: str
    process: asyncio.subprocess.Process


@pytest.fixture
async def served(fake: FakeProvider, tmp_path: Path) -> AsyncIterator[Served]:
    settings = tmp_path / "provmw.toml"
    settings.write_text(f'[configurations.chat]\nprovider = "openai"\nmodel = "gpt-test"\n'
                        f'base_url = "{fake.openai_base_url}"\napi_key_env = "GATEWAY_TEST_UPSTREAM_KEY"\n'
                        f'[middleware.usage]\npath = "{tmp_path / "ledger.sqlite3"}"\n')
    keys = SqliteKeyStore(tmp_path / "keys.sqlite3")
    key, _ = await keys.create("acme")
    await keys.aclose()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "provmw.cli", "--config", str(settings), "serve", "--port", "0",
        "--keys", str(tmp_path / "keys.sqlite3"), "--shutdown-grace-s", "10", stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "GATEWAY_TEST_UPSTREAM_KEY": "sk-upstream"})
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
    assert "listening on " in line, line
    yield Served(line.rsplit(" ", 1)[1].strip(), key, process)
    if process.returncode is None:
        process.kill()
        await process.wait()


async def test_serve_answers_a_chat_and_stops_on_sigterm(served: Served) -> None:
    async with aiohttp.ClientSession() as client, client.post(
            f"{served.url}/v1/chat/completions", json=CHAT, headers={"authorization": f"Bearer {served.key}"}) as got:
        answer = await got.json()
    served.process.send_signal(signal.SIGTERM)
    assert answer["choices"][0]["message"]["content"] == "echo: hello there"
    assert await asyncio.wait_for(served.process.wait(), 30) == 0


async def test_sigterm_lets_a_stream_in_flight_finish(fake: FakeProvider, served: Served) -> None:
    fake.script(Fault(stall_after=2, stall_s=0.3))
    async with aiohttp.ClientSession() as client, client.post(
            f"{served.url}/v1/chat/completions", json={**CHAT, "stream": True},
            headers={"authorization": f"Bearer {served.key}"}) as stream:
        first = await stream.content.readline()
        served.process.send_signal(signal.SIGTERM)
        rest = await stream.content.read()
    assert first.startswith(b"data: ") and rest.rstrip().endswith(b"data: [DONE]")
    assert await asyncio.wait_for(served.process.wait(), 30) == 0
