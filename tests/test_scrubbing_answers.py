"""Issue 33 item 4: a provider that echoes the request's key in a 200 answer's identifying fields
(model, id, finish reason) gets it into neither the answer, the ledger, its write-ahead file, nor
the call log: the terminal scrubs answers with the scrubber that scrubs errors."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from provmw.config import ProviderConfig
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import Settings
from provmw.stores.usage import SqliteUsageStore
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, SENTINEL_KEY
from tests.hostile import HostileProvider


def echoing_answer(key: str) -> str:
    """A chat completion whose model, id and finish reason are the request's key."""
    choice = {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": key}
    return json.dumps({"id": key, "model": key, "choices": [choice],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})


@pytest.fixture
async def hostile() -> AsyncIterator[HostileProvider]:
    async with HostileProvider() as server:
        server.answer(echoing_answer(SENTINEL_KEY))
        yield server


def manager(hostile: HostileProvider, middleware: dict[str, Any] | None = None,
            host: PluginHost | None = None) -> ServiceManager:
    config = ProviderConfig(identifier="h", provider="openai", model="m", base_url=hostile.openai_base_url,
                            api_key=SENTINEL_KEY)
    settings = Settings(configurations={"h": config}, middleware=middleware or BUILTIN_MIDDLEWARE_OFF)
    return ServiceManager(settings, host=host or PluginHost(PluginPolicy(autoload=False), environ={}))


def bytes_under(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


async def test_an_answer_echoing_the_key_carries_it_in_no_field(hostile: HostileProvider) -> None:
    async with manager(hostile) as m:
        response = await m.chat("hi")
    assert (response.model, response.response_id, response.finish_reason) == ("***", "***", "***")
    assert SENTINEL_KEY not in json.dumps(response.to_dict())


async def test_the_ledger_and_its_write_ahead_file_hold_no_echoed_key(
        hostile: HostileProvider, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    async with manager(hostile, {**BUILTIN_MIDDLEWARE_OFF, "usage": {"path": str(ledger)}}) as m:
        await m.chat("hi")
        written_while_open = bytes_under(tmp_path)  # the write-ahead segment, before the writer removes it
    store = SqliteUsageStore(ledger)
    records = await store.records()
    await store.aclose()
    assert [r.model for r in records] == ["***"]
    assert SENTINEL_KEY.encode() not in written_while_open


async def test_the_call_log_holds_no_echoed_key(hostile: HostileProvider, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="provmw.calls")
    host = PluginHost(PluginPolicy(allow=("calllog",)), environ={})
    async with manager(hostile, {**BUILTIN_MIDDLEWARE_OFF, "call_log": {}}, host) as m:
        await m.chat("hi")
    assert "model=***" in caplog.text
    assert SENTINEL_KEY not in caplog.text


async def test_a_streamed_finish_reason_echoing_the_key_is_scrubbed(hostile: HostileProvider) -> None:
    head = {"id": SENTINEL_KEY, "model": SENTINEL_KEY}
    hostile.sse(json.dumps({**head, "choices": [{"index": 0, "delta": {"content": "hel"}, "finish_reason": None}]}),
                json.dumps({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": SENTINEL_KEY}]}),
                "[DONE]")
    async with manager(hostile) as m:
        chunks = [chunk async for chunk in m.stream_chat("hi")]
    assert [c.finish_reason for c in chunks] == [None, "***"]
