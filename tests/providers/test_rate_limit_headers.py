"""The providers' rate-limit headers on answered calls, read per wire into ``response.rate_limit``:
OpenAI's ``x-ratelimit-*`` (durations), Anthropic's ``anthropic-ratelimit-*`` (RFC 3339 times);
a number that does not parse, is negative or is absurd is ignored, never believed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st

from provmw.config import ProviderConfig
from provmw.http import HttpClient, SSEEvent, anthropic_rate_limit, openai_rate_limit
from provmw.messages import Message
from provmw.providers.anthropic import AnthropicAdapter
from provmw.providers.openai import OpenAIAdapter
from provmw.requests import ChatRequest, EmbeddingRequest
from provmw.responses import MAX_RATE_LIMIT_COUNT, MAX_RATE_LIMIT_RESET_S, RateLimitHint
from provmw.testing import FakeClock, FakeProvider
from provmw.testing.wires import anthropic_message, openai_chat

CHAT = ChatRequest(messages=(Message(role="user", content="hi"),))
NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    client = HttpClient()
    yield client
    await client.aclose()


def openai(fake: FakeProvider | str, model: str = "m", **fields: Any) -> ProviderConfig:
    base = fake if isinstance(fake, str) else fake.openai_base_url
    return ProviderConfig(identifier="o", provider="openai", model=model, base_url=base, **fields)


def anthropic(fake: FakeProvider | str, model: str = "m", **fields: Any) -> ProviderConfig:
    base = fake if isinstance(fake, str) else fake.anthropic_base_url
    return ProviderConfig(identifier="a", provider="anthropic", model=model, base_url=base, **fields)


async def _answer_with_asked_headers(request: web.Request) -> web.Response:
    """A chat answer (OpenAI's or Anthropic's, by path) carrying the headers the request asked for."""
    body = await request.json()
    payload = anthropic_message(body) if request.path.endswith("/messages") else openai_chat(body)
    return web.json_response(payload, headers=json.loads(request.headers.get("X-Answer-Headers", "{}")))


@pytest.fixture
async def echo() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/{tail:.*}", _answer_with_asked_headers)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield f"http://127.0.0.1:{server.port}"
    await server.close()


def asking(headers: Mapping[str, str]) -> dict[str, Any]:
    return {"headers": {"X-Answer-Headers": json.dumps(dict(headers))}}


async def test_an_openai_answer_under_a_limit_says_what_is_left(fake: FakeProvider, http: HttpClient) -> None:
    fake.limit(2, model="m", clock=FakeClock(0.0))
    first = await OpenAIAdapter().chat(http, openai(fake), CHAT)
    second = await OpenAIAdapter().chat(http, openai(fake), CHAT)
    assert (first.rate_limit, second.rate_limit) == (
        RateLimitHint(remaining_requests=1, requests_reset_s=0.0),
        RateLimitHint(remaining_requests=0, requests_reset_s=60.0))


async def test_an_openai_embedding_carries_the_hint_too(fake: FakeProvider, http: HttpClient) -> None:
    fake.limit(1, model="e", clock=FakeClock(0.0))
    response = await OpenAIAdapter().embed(http, openai(fake, "e"), EmbeddingRequest(inputs=("x",)))
    assert response.rate_limit == RateLimitHint(remaining_requests=0, requests_reset_s=60.0)


async def test_an_openai_stream_puts_the_hint_on_its_first_chunk_only(fake: FakeProvider, http: HttpClient) -> None:
    fake.limit(5, model="m", clock=FakeClock(0.0))
    chunks = [c async for c in OpenAIAdapter().stream_chat(http, openai(fake), CHAT)]
    assert chunks[0].rate_limit == RateLimitHint(remaining_requests=4, requests_reset_s=0.0)
    assert [c.rate_limit for c in chunks[1:]] == [None] * (len(chunks) - 1)


async def test_an_answer_without_a_limit_carries_no_hint(fake: FakeProvider, http: HttpClient) -> None:
    response = await OpenAIAdapter().chat(http, openai(fake), CHAT)
    assert response.rate_limit is None


async def test_an_anthropic_answer_says_what_is_left_and_when_it_resets(fake: FakeProvider,
                                                                         http: HttpClient) -> None:
    fake.limit(1, model="m", clock=FakeClock(0.0))
    response = await AnthropicAdapter().chat(http, anthropic(fake), CHAT)
    hint = response.rate_limit
    assert hint is not None and hint.remaining_requests == 0 and hint.remaining_tokens is None
    assert hint.requests_reset_s is not None and 55.0 < hint.requests_reset_s <= 60.001


async def test_an_anthropic_stream_puts_the_hint_on_its_first_chunk(fake: FakeProvider, http: HttpClient) -> None:
    fake.limit(3, model="m", clock=FakeClock(0.0))
    chunks = [c async for c in AnthropicAdapter().stream_chat(http, anthropic(fake), CHAT)]
    hint = chunks[0].rate_limit
    assert hint is not None and hint.remaining_requests == 2  # the reset: now, as a time to the ms
    assert [c.rate_limit for c in chunks[1:]] == [None] * (len(chunks) - 1)


async def test_openai_durations_are_read_as_the_api_writes_them(echo: str, http: HttpClient) -> None:
    headers = {"x-ratelimit-remaining-requests": "59", "x-ratelimit-remaining-tokens": "149984",
               "x-ratelimit-reset-requests": "6m0s", "x-ratelimit-reset-tokens": "20ms"}
    response = await OpenAIAdapter().chat(http, openai(f"{echo}/v1", **asking(headers)), CHAT)
    assert response.rate_limit == RateLimitHint(remaining_requests=59, remaining_tokens=149984,
                                                requests_reset_s=360.0, tokens_reset_s=0.02)


async def test_garbage_openai_numbers_are_ignored(echo: str, http: HttpClient) -> None:
    headers = {"x-ratelimit-remaining-requests": "-1", "x-ratelimit-remaining-tokens": "lots",
               "x-ratelimit-reset-requests": "soon"}
    response = await OpenAIAdapter().chat(http, openai(f"{echo}/v1", **asking(headers)), CHAT)
    assert response.rate_limit is None


async def test_an_absurd_count_or_reset_is_ignored_and_the_rest_kept(echo: str, http: HttpClient) -> None:
    headers = {"x-ratelimit-remaining-requests": "3", "x-ratelimit-remaining-tokens": str(10**15),
               "x-ratelimit-reset-requests": "100000h", "x-ratelimit-reset-tokens": "NaNs"}
    response = await OpenAIAdapter().chat(http, openai(f"{echo}/v1", **asking(headers)), CHAT)
    assert response.rate_limit == RateLimitHint(remaining_requests=3)


async def test_anthropic_takes_the_token_limit_with_the_fewest_left(echo: str, http: HttpClient) -> None:
    headers = {"anthropic-ratelimit-input-tokens-remaining": "900",
               "anthropic-ratelimit-input-tokens-reset": "2099-01-01T00:00:00Z",
               "anthropic-ratelimit-output-tokens-remaining": "40",
               "anthropic-ratelimit-output-tokens-reset": "2000-01-01T00:00:00+00:00"}
    response = await AnthropicAdapter().chat(http, anthropic(echo, **asking(headers)), CHAT)
    assert response.rate_limit == RateLimitHint(remaining_tokens=40, tokens_reset_s=0.0)


def test_an_anthropic_reset_further_than_a_day_is_ignored() -> None:
    headers = {"anthropic-ratelimit-requests-remaining": "0",
               "anthropic-ratelimit-requests-reset": "2099-01-01T00:00:00Z"}
    assert anthropic_rate_limit(headers, now=NOW) == RateLimitHint(remaining_requests=0)


def test_an_anthropic_reset_without_a_zone_is_ignored() -> None:
    headers = {"anthropic-ratelimit-requests-remaining": "1",
               "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:30"}
    assert anthropic_rate_limit(headers, now=NOW) == RateLimitHint(remaining_requests=1)


@pytest.mark.parametrize(("text", "seconds"), [("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5),
                                               ("0.5", 0.5), ("250us", 0.00025)])
def test_go_durations(text: str, seconds: float) -> None:
    hint = openai_rate_limit({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": text})
    assert hint is not None and hint.requests_reset_s == pytest.approx(seconds)


HEADER_NAMES = ["x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-requests",
                "x-ratelimit-reset-tokens", "anthropic-ratelimit-requests-remaining",
                "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-requests-reset",
                "anthropic-ratelimit-tokens-reset"]


@given(st.dictionaries(st.sampled_from(HEADER_NAMES), st.text(max_size=30) | st.integers(-10**12, 10**12).map(str)))
def test_any_header_text_gives_a_bounded_hint_or_none(headers: dict[str, str]) -> None:
    for hint in (openai_rate_limit(headers), anthropic_rate_limit(headers, now=NOW)):
        if hint is not None:
            assert all(v is None or 0 <= v <= MAX_RATE_LIMIT_COUNT for v in (hint.remaining_requests,
                                                                            hint.remaining_tokens))
            assert all(v is None or 0 <= v <= MAX_RATE_LIMIT_RESET_S for v in (hint.requests_reset_s,
                                                                              hint.tokens_reset_s))


class OnlyPostJson(HttpClient):
    """A client written before the headers were read: it overrides ``post_json`` alone."""

    async def post_json(self, url: Any, body: Any, headers: Mapping[str, str]) -> Any:
        return {"overridden": True}


async def test_a_client_overriding_only_post_json_still_serves_the_adapters() -> None:
    client = OnlyPostJson()
    assert await client.post_json_with_headers("http://127.0.0.1:9/", {}, {}) == ({"overridden": True}, {})


class OnlyPostSse(HttpClient):
    """A client written before the headers were read: it overrides ``post_sse`` alone."""

    async def post_sse(self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], *,
                       read_timeout_s: float | None = None) -> AsyncIterator[SSEEvent]:
        yield SSEEvent(data="overridden")


async def test_a_client_overriding_only_post_sse_still_serves_the_adapters_streams() -> None:
    seen: list[Mapping[str, str]] = []
    events = OnlyPostSse().post_sse_with_headers("http://127.0.0.1:9/", {}, {}, on_headers=seen.append)
    assert ([e.data async for e in events], seen) == (["overridden"], [])

