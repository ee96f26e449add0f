"""A stream's size over real HTTP: its whole is bounded by ``[http] max_stream_bytes``, and what
its end keeps by ``END_KEPT_CHARS``; a stream stopped at the limit still ends once, settled."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from provmw.errors import StreamInterruptedError, StreamTooLargeError
from provmw.http import HttpClient, ReadLimits
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.stores.usage import SqliteUsageStore, UsageRecord
from provmw.streams import END_KEPT_CHARS, OpenedStream, StreamEnd
from provmw.testing import FakeProvider
from tests.conftest import openai_config

MIB = 1024 * 1024
# 25,000 one-word events, about 4 MiB of OpenAI events: the first read (at most a few hundred
# KiB are buffered) fits under the limit, so the stream opens and is stopped after it; an
# answer of 1,100 words of 1,000 characters (1.3 MB of events) passes whole.
LIMIT = 2 * MIB
LONG_PROMPT = "ab " * 25_000
WIDE_PROMPT = " ".join(["w" * 999] * 1100)
PRICE = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0, "max_output_tokens": 1_000_000}


class KeepsTheEnds:
    """An outer layer that keeps each stream's end, as a plugin's callback sees it."""

    name, priority = "keeps_the_ends", 990

    def __init__(self) -> None:
        self.ends: list[StreamEnd] = []

    async def handle(self, ctx: Any, config: Any, next: Any) -> Any:
        response = await next(config)
        if isinstance(response, OpenedStream):
            async def keep(end: StreamEnd) -> None:
                self.ends.append(end)

            response.on_end(keep)
        return response


def settings(fake: FakeProvider, ledger: Path, **limits: int) -> Settings:
    return Settings(configurations={"oa": openai_config(fake, price=PRICE)}, http=ReadLimits(**limits),
                    middleware={"budget": {"path": str(ledger), "limits": [{"scope": "global", "max_cost_usd": 10}]},
                                "usage": {"path": str(ledger)}})


@pytest.fixture
async def ends() -> KeepsTheEnds:
    return KeepsTheEnds()


@pytest.fixture
async def manager(fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path,
                  ends: KeepsTheEnds) -> AsyncIterator[ServiceManager]:
    # One connection: a stream that kept its connection would leave the next call waiting.
    http = HttpClient(connector_limit=1, limits=ReadLimits(max_stream_bytes=LIMIT))
    async with ServiceManager(settings(fake, tmp_path / "ledger.sqlite3", max_stream_bytes=LIMIT),
                              host=builtin_only, middleware=[ends], http=http) as manager:
        yield manager
    await http.aclose()


async def read(stream: AsyncIterator[Any]) -> str:
    return "".join([chunk.text async for chunk in stream])


async def ledger(path: Path) -> list[UsageRecord]:
    store = SqliteUsageStore(path)
    found = await store.records()
    await store.aclose()
    return found


async def test_a_stream_past_max_stream_bytes_is_interrupted_by_a_stream_too_large_error(
        manager: ServiceManager) -> None:
    with pytest.raises(StreamInterruptedError) as caught:
        await read(manager.stream_chat(LONG_PROMPT))
    cause = caught.value.__cause__
    assert isinstance(cause, StreamTooLargeError) and cause.limit_bytes == LIMIT
    assert "max_stream_bytes" in str(caught.value)


async def test_a_stream_stopped_at_the_limit_ends_once_settled_as_estimated(
        manager: ServiceManager, ends: KeepsTheEnds, tmp_path: Path) -> None:
    with pytest.raises(StreamInterruptedError):
        await read(manager.stream_chat(LONG_PROMPT))
    [bucket] = await manager.state.budget_store().states(now=time.time())
    await manager.aclose()
    [record] = await ledger(tmp_path / "ledger.sqlite3")
    assert [(e.usage_estimated, type(e.error)) for e in ends.ends] == [(True, StreamTooLargeError)]
    assert (record.status, record.error_type, record.billed) == ("error", "StreamTooLargeError", "estimated")
    assert record.output_tokens == ends.ends[0].response.usage.output_tokens > 0
    assert (bucket.reserved.cost_micro_usd, bucket.spent.cost_micro_usd) == (0, round((record.cost_usd or 0) * 1e6))


async def test_a_stream_stopped_at_the_limit_releases_its_connection(manager: ServiceManager) -> None:
    with pytest.raises(StreamInterruptedError):
        await read(manager.stream_chat(LONG_PROMPT))
    async with asyncio.timeout(10):  # the pool holds one connection: this call needs it back
        assert (await manager.chat("again")).text == "echo: again"


async def test_a_stream_over_the_limit_before_its_first_content_is_refused_unretried(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    async with ServiceManager(settings(fake, tmp_path / "l.sqlite3", max_stream_bytes=64), host=builtin_only) as m:
        with pytest.raises(StreamTooLargeError, match=r"limit of 64 bytes \(\[http\] max_stream_bytes\)"):
            await read(m.stream_chat("hello there"))
    assert fake.count() == 1


async def test_the_end_keeps_the_beginning_of_a_long_stream_and_says_it_is_cut(
        manager: ServiceManager, ends: KeepsTheEnds) -> None:
    streamed = await read(manager.stream_chat(WIDE_PROMPT))
    [end] = ends.ends
    assert len(streamed) > END_KEPT_CHARS and end.truncated and end.completed
    assert end.response.text == streamed[:END_KEPT_CHARS]


async def test_an_estimate_counts_the_text_the_end_did_not_keep(
        manager: ServiceManager, ends: KeepsTheEnds) -> None:
    stream, seen = manager.stream_chat(WIDE_PROMPT), 0
    while seen <= END_KEPT_CHARS + 4000:
        seen += len((await anext(stream)).text)
    await stream.aclose()  # before the usage event: the usage is estimated from the text seen
    [end] = ends.ends
    assert end.usage_estimated and end.truncated
    assert end.response.usage.output_tokens == seen // 4 + 1


async def test_a_short_stream_is_kept_whole(manager: ServiceManager, ends: KeepsTheEnds) -> None:
    streamed = await read(manager.stream_chat("one two three"))
    [end] = ends.ends
    assert (end.response.text, end.truncated) == (streamed, False)
