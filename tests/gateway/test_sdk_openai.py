"""The official OpenAI SDK, unmodified, as a client of the gateway (whose manager calls a FakeProvider)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam

from provmw.testing import FakeProvider, Fault
from tests.gateway.test_server import Running, running_gateway

__all__ = ["gw"]

TEXT = "héllo wörld ✓ 世界, twice  spaced"
WEATHER: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {"name": "weather", "description": "the weather in a city",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture
async def gw(fake: FakeProvider, tmp_path: Path) -> AsyncIterator[Running]:
    async with running_gateway(fake, tmp_path) as running:
        yield running


def sdk(gw: Running, *, key: str | None = None, max_retries: int = 0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=key or gw.key, max_retries=max_retries)


async def test_chat_answers_with_usage(gw: Running) -> None:
    answer = await sdk(gw).chat.completions.create(model="chat", messages=[{"role": "user", "content": TEXT}])
    assert answer.choices[0].message.content == f"echo: {TEXT}"
    assert answer.usage is not None and answer.usage.completion_tokens > 0 and answer.model == "chat"


async def test_a_stream_carries_the_upstream_text_byte_for_byte_and_usage(gw: Running) -> None:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": TEXT}]
    direct = openai.AsyncOpenAI(base_url=gw.fake.openai_base_url, api_key="x")
    upstream = [c async for c in await direct.chat.completions.create(model="gpt-test", messages=messages,
                                                                     stream=True)]
    through = [c async for c in await sdk(gw).chat.completions.create(
        model="chat", messages=messages, stream=True, stream_options={"include_usage": True})]
    assert "".join(c.choices[0].delta.content or "" for c in through if c.choices) == \
        "".join(c.choices[0].delta.content or "" for c in upstream if c.choices)
    assert through[-1].usage is not None and through[-1].usage.prompt_tokens > 0


async def test_tools_come_back_as_tool_calls(gw: Running) -> None:
    answer = await sdk(gw).chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "weather in Paris?"}], tools=[WEATHER])
    calls = answer.choices[0].message.tool_calls
    assert answer.choices[0].finish_reason == "tool_calls" and calls and calls[0].function.name == "weather"  # type: ignore[union-attr]


async def test_a_streamed_tool_call_arrives_whole(gw: Running) -> None:
    stream = await sdk(gw).chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "weather in Paris?"}], tools=[WEATHER], stream=True)
    calls = [t for c in [c async for c in stream] if c.choices for t in c.choices[0].delta.tool_calls or ()]
    assert calls and calls[0].function and calls[0].function.name == "weather"


async def test_embeddings_decode_from_base64(gw: Running) -> None:
    answer = await sdk(gw).embeddings.create(model="chat", input=["one", "two"])
    direct = await openai.AsyncOpenAI(base_url=gw.fake.openai_base_url, api_key="x").embeddings.create(
        model="gpt-test-embed", input=["one", "two"])
    assert len(answer.data) == 2
    assert answer.data[1].embedding == pytest.approx(direct.data[1].embedding, rel=1e-6)


async def test_an_unknown_key_is_the_sdks_authentication_error_and_sends_nothing(gw: Running) -> None:
    with pytest.raises(openai.AuthenticationError):
        await sdk(gw, key="pmk_000000000000_wrong").chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}])
    assert gw.fake.count() == 0


async def test_a_429_is_retried_by_the_sdk_after_the_retry_after_sent(fake: FakeProvider, tmp_path: Path) -> None:
    fake.script(Fault(status=429, headers={"retry-after-ms": "5"}))
    async with running_gateway(fake, tmp_path, middleware={"retry": {"enabled": False}}) as gw:
        raw = await sdk(gw, max_retries=1).chat.completions.with_raw_response.create(
            model="chat", messages=[{"role": "user", "content": "hi"}])
    assert raw.retries_taken == 1 and fake.count() == 2


async def test_a_budget_refusal_is_the_sdks_rate_limit_error_naming_the_bucket(gw: Running) -> None:
    await gw.keys.set_budget("key", gw.record.key_id, "total", max_requests=0)
    with pytest.raises(openai.RateLimitError) as refused:
        await sdk(gw, max_retries=2).chat.completions.create(model="chat",
                                                             messages=[{"role": "user", "content": "hi"}])
    assert gw.record.key_id in refused.value.message and gw.fake.count() == 0
    assert refused.value.response.headers["x-should-retry"] == "false"


async def test_the_secret_reaches_no_log(gw: Running, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    client = sdk(gw)
    await client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    assert gw.key.split("_", 2)[2] not in caplog.text


async def test_a_json_schema_response_format_is_the_calls_schema(gw: Running) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    answer = await sdk(gw).chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "a city"}],
        response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": schema, "strict": True}})
    assert isinstance(json.loads(answer.choices[0].message.content or "")["city"], str)
