"""Finding 4 of the security review: every read is bounded in size and a stream in idle time."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from provmw.config import ProviderConfig
from provmw.errors import ProviderTimeoutError, ProviderUnavailableError, ResponseTooLargeError, disposition
from provmw.http import HttpClient, ReadLimits
from provmw.messages import Message
from provmw.providers.anthropic import AnthropicAdapter
from provmw.providers.openai import OpenAIAdapter
from provmw.requests import ChatRequest
from provmw.responses import ChatChunk
from tests.hostile import HostileProvider

MIB = 1024 * 1024
GIB = 1024 * MIB
CHAT = ChatRequest((Message.user("hi"),))
CHAT_BODY = b'{"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}'


def openai(hostile: HostileProvider) -> ProviderConfig:
    return ProviderConfig(identifier="h", provider="openai", model="m", base_url=hostile.openai_base_url)


def anthropic(hostile: HostileProvider) -> ProviderConfig:
    return ProviderConfig(identifier="a", provider="anthropic", model="c", base_url=hostile.anthropic_base_url)


@pytest.fixture
async def tight() -> AsyncIterator[HttpClient]:
    """A client with small limits, so refusals come quickly."""
    client = HttpClient(limits=ReadLimits(max_body_bytes=1024, max_event_bytes=1024, stream_idle_s=0.3))
    yield client
    await client.aclose()


def _status_kib(field: str) -> int:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field))
    return int(line.split()[1])


def reset_peak_rss() -> int:
    """Reset the kernel's peak-RSS mark to the current RSS and return that, in bytes."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_kib("VmRSS:") * 1024


def peak_rss() -> int:
    return _status_kib("VmHWM:") * 1024


async def drain(chunks: AsyncIterator[ChatChunk]) -> list[ChatChunk]:
    return [chunk async for chunk in chunks]


async def test_a_1_gib_body_is_refused_without_holding_it(hostile: HostileProvider, http: HttpClient) -> None:
    hostile.flood(GIB)
    before = reset_peak_rss()
    with pytest.raises(ResponseTooLargeError) as caught:
        await OpenAIAdapter().chat(http, openai(hostile), CHAT)
    assert peak_rss() - before < 200 * MIB
    assert (caught.value.limit_bytes, caught.value.provider) == (64 * MIB, "openai")


async def test_a_1_gib_error_body_is_cut_and_keeps_its_status(hostile: HostileProvider, http: HttpClient) -> None:
    hostile.flood(GIB, status=503)
    before = reset_peak_rss()
    with pytest.raises(ProviderUnavailableError) as caught:
        await AnthropicAdapter().chat(http, anthropic(hostile), CHAT)
    assert peak_rss() - before < 200 * MIB
    assert caught.value.status == 503


async def test_a_declared_length_over_the_limit_is_refused_unread(hostile: HostileProvider, tight: HttpClient) -> None:
    hostile.flood(2 * GIB, declare_length=True)
    with pytest.raises(ResponseTooLargeError, match="declares 2147483648 bytes"):
        await OpenAIAdapter().chat(tight, openai(hostile), CHAT)


async def test_a_body_of_exactly_the_limit_is_read(hostile: HostileProvider, tight: HttpClient) -> None:
    hostile.flood(1024, prefix=CHAT_BODY)
    assert (await OpenAIAdapter().chat(tight, openai(hostile), CHAT)).text == "ok"


async def test_a_body_one_byte_over_the_limit_is_refused(hostile: HostileProvider, tight: HttpClient) -> None:
    hostile.flood(1025, prefix=CHAT_BODY)
    with pytest.raises(ResponseTooLargeError, match=r"longer than the limit of 1024 bytes \(\[http\] max_body_bytes\)"):
        await OpenAIAdapter().chat(tight, openai(hostile), CHAT)


async def test_an_endless_sse_line_is_refused_at_the_default_limit(hostile: HostileProvider, http: HttpClient) -> None:
    hostile.endless_line()
    with pytest.raises(ResponseTooLargeError, match="max_event_bytes") as caught:
        await drain(OpenAIAdapter().stream_chat(http, openai(hostile), CHAT))
    assert caught.value.limit_bytes == 16 * MIB


async def test_an_sse_event_of_many_short_lines_is_refused(hostile: HostileProvider, tight: HttpClient) -> None:
    hostile.answer("data: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n" * 100, content_type="text/event-stream")
    with pytest.raises(ResponseTooLargeError, match="SSE event's data"):
        await drain(AnthropicAdapter().stream_chat(tight, anthropic(hostile), CHAT))


async def test_keepalive_comments_do_not_hold_a_stream_open(hostile: HostileProvider, tight: HttpClient) -> None:
    hostile.keepalives(every_s=0.01)
    with pytest.raises(ProviderTimeoutError, match=r"no event for 0.3s \(\[http\] stream_idle_s\)"):
        await drain(OpenAIAdapter().stream_chat(tight, openai(hostile), CHAT))


async def test_a_flood_of_comments_does_not_hold_a_stream_open(hostile: HostileProvider, tight: HttpClient) -> None:
    hostile.keepalives(every_s=0, comment=b": ping\n" * 100)
    with pytest.raises(ProviderTimeoutError, match="stream_idle_s"):
        await drain(OpenAIAdapter().stream_chat(tight, openai(hostile), CHAT))


async def test_ping_events_do_not_hold_a_stream_open(hostile: HostileProvider, tight: HttpClient) -> None:
    hostile.keepalives(every_s=0.01, comment=b'event: ping\ndata: {"type": "ping"}\n\n')
    with pytest.raises(ProviderTimeoutError, match="stream_idle_s"):
        await drain(AnthropicAdapter().stream_chat(tight, anthropic(hostile), CHAT))


async def test_events_keep_a_slow_stream_alive(hostile: HostileProvider, tight: HttpClient) -> None:
    event = b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
    hostile.drip([event] * 40 + [b"data: [DONE]\n\n"], every_s=0.02)  # 0.8 s in all, over the 0.3 s limit
    chunks = await drain(OpenAIAdapter().stream_chat(tight, openai(hostile), CHAT))
    assert "".join(c.text for c in chunks) == "a" * 40


def test_too_large_is_not_retried_but_may_fall_back() -> None:
    verdict = disposition(ResponseTooLargeError("big", limit_bytes=1))
    assert (verdict.retryable, verdict.may_fall_back) == (False, True)


def test_too_large_pickles_with_its_limit() -> None:
    error = ResponseTooLargeError("big", limit_bytes=7, provider="p", model="m")
    restored = pickle.loads(pickle.dumps(error))
    assert (type(restored), restored.limit_bytes, str(restored)) == (ResponseTooLargeError, 7, "p/m: big")


async def test_a_slow_consumer_is_not_an_idle_provider(hostile: HostileProvider, tight: HttpClient) -> None:
    events = [b'data: {"choices": [{"delta": {"content": "%s"}}]}\n\n' % t for t in (b"a", b"b")]
    hostile.drip([*events, b"data: [DONE]\n\n"], every_s=0.01)
    texts = []
    async for chunk in OpenAIAdapter().stream_chat(tight, openai(hostile), CHAT):
        texts.append(chunk.text)
        await asyncio.sleep(0.4)  # longer than the 0.3 s idle limit, while the next events wait
    assert "".join(texts) == "ab"
