"""Adapters normalise usage the same way and reject counts no provider could mean (ADR 0015).

Every body here travels over real HTTP from the fake provider (``Fault(usage=...)``).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provmw.errors import MalformedResponseError
from provmw.http import HttpClient
from provmw.messages import Message
from provmw.providers._usage import MAX_TOKEN_COUNT, UsageBody
from provmw.providers.anthropic import AnthropicAdapter
from provmw.providers.openai import OpenAIAdapter
from provmw.requests import ChatRequest, EmbeddingRequest
from provmw.responses import ChatChunk, Usage
from provmw.testing import FakeProvider, Fault
from tests.conftest import anthropic_config, openai_config

HI = ChatRequest((Message.user("hi"),))


async def openai_usage(fake: FakeProvider, http: HttpClient, body: Any) -> Usage:
    fake.script(Fault(usage=body))
    return (await OpenAIAdapter().chat(http, openai_config(fake), HI)).usage


async def anthropic_usage(fake: FakeProvider, http: HttpClient, body: Any) -> Usage:
    fake.script(Fault(usage=body))
    return (await AnthropicAdapter().chat(http, anthropic_config(fake), HI)).usage


async def streamed_usage(adapter: Any, config: Any, fake: FakeProvider, http: HttpClient, body: Any) -> Usage | None:
    fake.script(Fault(usage=body))
    chunks: list[ChatChunk] = [chunk async for chunk in adapter.stream_chat(http, config, HI)]
    return chunks[-1].usage


OPENAI_BODY = {"prompt_tokens": 2000, "completion_tokens": 900, "prompt_tokens_details": {"cached_tokens": 1536},
               "completion_tokens_details": {"reasoning_tokens": 640}}
OPENAI_USAGE = Usage(input_tokens=2000, output_tokens=900, cached_input_tokens=1536, reasoning_tokens=640)
ANTHROPIC_BODY = {"input_tokens": 50, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 700,
                  "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 400},
                  "output_tokens": 80}
ANTHROPIC_USAGE = Usage(input_tokens=1750, output_tokens=80, cached_input_tokens=1000,
                        cache_write_5m_tokens=300, cache_write_1h_tokens=400)


async def test_openai_input_includes_cached_and_output_includes_reasoning(fake: FakeProvider,
                                                                          http: HttpClient) -> None:
    assert await openai_usage(fake, http, OPENAI_BODY) == OPENAI_USAGE


async def test_openai_null_details_read_as_zero(fake: FakeProvider, http: HttpClient) -> None:
    body = {"prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": None,
            "completion_tokens_details": {"reasoning_tokens": None}}
    assert await openai_usage(fake, http, body) == Usage(input_tokens=5, output_tokens=2)


async def test_openai_stream_usage_is_normalised_the_same_way(fake: FakeProvider, http: HttpClient) -> None:
    assert await streamed_usage(OpenAIAdapter(), openai_config(fake), fake, http, OPENAI_BODY) == OPENAI_USAGE


async def test_openai_embedding_usage_is_checked_too(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(usage={"prompt_tokens": -3, "total_tokens": -3}))
    with pytest.raises(MalformedResponseError, match="usage.prompt_tokens"):
        await OpenAIAdapter().embed(http, openai_config(fake), EmbeddingRequest(["a"]))


async def test_anthropic_input_adds_cache_reads_and_writes_split_by_ttl(fake: FakeProvider,
                                                                        http: HttpClient) -> None:
    assert await anthropic_usage(fake, http, ANTHROPIC_BODY) == ANTHROPIC_USAGE


async def test_anthropic_writes_without_a_split_are_five_minute_writes(fake: FakeProvider,
                                                                       http: HttpClient) -> None:
    body = {"input_tokens": 3, "cache_creation_input_tokens": 12304, "cache_read_input_tokens": 0,
            "output_tokens": 550}
    usage = await anthropic_usage(fake, http, body)
    assert usage == Usage(input_tokens=12307, output_tokens=550, cache_write_5m_tokens=12304)


async def test_anthropic_stream_usage_is_normalised_the_same_way(fake: FakeProvider, http: HttpClient) -> None:
    usage = await streamed_usage(AnthropicAdapter(), anthropic_config(fake), fake, http, ANTHROPIC_BODY)
    assert usage == ANTHROPIC_USAGE


async def test_anthropic_split_larger_than_its_total_is_malformed(fake: FakeProvider, http: HttpClient) -> None:
    body = {**ANTHROPIC_BODY, "cache_creation_input_tokens": 10}
    with pytest.raises(MalformedResponseError, match="cache_creation .*exceeds cache_creation_input_tokens"):
        await anthropic_usage(fake, http, body)


@pytest.mark.parametrize("value", [-1, 1.5, 3.0, True, "12", [1], MAX_TOKEN_COUNT, 2**63])
async def test_a_count_that_is_not_a_sane_integer_is_malformed_and_named(fake: FakeProvider, http: HttpClient,
                                                                         value: object) -> None:
    with pytest.raises(MalformedResponseError, match=r"usage\.completion_tokens must be an integer"):
        await openai_usage(fake, http, {"prompt_tokens": 1, "completion_tokens": value})


@pytest.mark.parametrize("path", [("cache_read_input_tokens",), ("cache_creation", "ephemeral_1h_input_tokens")])
async def test_a_bad_nested_anthropic_count_is_named(fake: FakeProvider, http: HttpClient,
                                                     path: tuple[str, ...]) -> None:
    body: dict[str, Any] = {"input_tokens": 1, "output_tokens": 1}
    body[path[0]] = -7 if len(path) == 1 else {path[1]: -7}
    with pytest.raises(MalformedResponseError, match=r"usage\." + r"\.".join(path)):
        await anthropic_usage(fake, http, body)


def test_a_usage_that_is_not_an_object_is_malformed() -> None:
    with pytest.raises(MalformedResponseError, match="usage must be an object, got list"):
        UsageBody.of([1, 2], provider="openai", model="m")


async def test_a_detail_that_is_not_an_object_is_malformed(fake: FakeProvider, http: HttpClient) -> None:
    with pytest.raises(MalformedResponseError, match=r"usage\.prompt_tokens_details must be an object"):
        await openai_usage(fake, http, {"prompt_tokens": 1, "prompt_tokens_details": 5})


async def test_cached_tokens_above_the_prompt_are_malformed(fake: FakeProvider, http: HttpClient) -> None:
    body = {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 11}}
    with pytest.raises(MalformedResponseError, match=r"cache reads and writes \(11\) exceed the input tokens \(10\)"):
        await openai_usage(fake, http, body)


async def test_reasoning_above_the_output_is_malformed(fake: FakeProvider, http: HttpClient) -> None:
    body = {"prompt_tokens": 10, "completion_tokens": 1, "completion_tokens_details": {"reasoning_tokens": 2}}
    with pytest.raises(MalformedResponseError, match=r"reasoning tokens \(2\) exceed the output tokens \(1\)"):
        await openai_usage(fake, http, body)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plain=st.integers(0, 10**7), reads=st.integers(0, 10**7), five=st.integers(0, 10**7),
       hour=st.integers(0, 10**7), output=st.integers(0, 10**6))
async def test_anthropic_parts_always_fit_their_whole(fake: FakeProvider, http: HttpClient, plain: int, reads: int,
                                                      five: int, hour: int, output: int) -> None:
    body = {"input_tokens": plain, "cache_read_input_tokens": reads, "cache_creation_input_tokens": five + hour,
            "cache_creation": {"ephemeral_5m_input_tokens": five, "ephemeral_1h_input_tokens": hour},
            "output_tokens": output}
    usage = await anthropic_usage(fake, http, body)
    assert usage.input_tokens == plain + reads + five + hour
    assert (usage.cached_input_tokens, usage.cache_write_5m_tokens, usage.cache_write_1h_tokens) == (reads, five, hour)
