from __future__ import annotations

import pytest

from provmw.errors import (
    ContextLengthExceededError,
    ProviderUnavailableError,
    RateLimitError,
    UnsupportedOperationError,
)
from provmw.http import HttpClient
from provmw.messages import ImagePart, Message, TextPart, ToolCall, ToolSpec
from provmw.providers.anthropic import DEFAULT_MAX_TOKENS, AnthropicAdapter
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest
from provmw.testing import FakeProvider, Fault
from tests.conftest import SENTINEL_KEY, anthropic_config

ADAPTER = AnthropicAdapter()
WEATHER = ToolSpec(name="weather", description="Weather by city")


async def test_chat_request_shape_with_system_and_max_tokens(fake: FakeProvider, http: HttpClient) -> None:
    request = ChatRequest((Message.system("be brief"), Message.user("hi")), options={"temperature": 0, "stop": "END"})
    response = await ADAPTER.chat(http, anthropic_config(fake), request)
    sent = fake.received[-1]
    assert sent.body == {"model": "claude-test", "max_tokens": DEFAULT_MAX_TOKENS, "system": "be brief",
                         "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                         "temperature": 0, "stop_sequences": ["END"]}
    assert sent.headers["x-api-key"] == SENTINEL_KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert (response.text, response.finish_reason) == ("echo: hi", "stop")


async def test_tool_use_and_tool_result_shapes(fake: FakeProvider, http: HttpClient) -> None:
    first = await ADAPTER.chat(http, anthropic_config(fake), ChatRequest((Message.user("Paris"),), tools=(WEATHER,)))
    assert first.tool_calls == (ToolCall(id="toolu_0", name="weather", arguments='{"query": "Paris"}'),)
    assert first.finish_reason == "tool_calls"
    history = (Message.user("Paris"), Message.assistant(tool_calls=first.tool_calls), Message.tool("toolu_0", "sunny"))
    await ADAPTER.chat(http, anthropic_config(fake), ChatRequest(history, tools=(WEATHER,)))
    messages = fake.received[-1].body["messages"]
    assert messages[1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_0", "name": "weather", "input": {"query": "Paris"}}]}
    assert messages[2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_0", "content": "sunny"}]}
    assert fake.received[-1].body["tools"] == [
        {"name": "weather", "description": "Weather by city", "input_schema": {"type": "object", "properties": {}}}]


async def test_images_as_base64_and_url(fake: FakeProvider, http: HttpClient) -> None:
    parts = (TextPart("what?"), ImagePart(data=b"abc", media_type="image/png"), ImagePart(url="https://x.test/a.png"))
    response = await ADAPTER.chat(http, anthropic_config(fake), ChatRequest((Message.user(parts),)))
    assert fake.received[-1].body["messages"][0]["content"][1:] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "YWJj"}},
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}]
    assert response.text.startswith("I see 2 images.")


async def test_completion_is_one_user_turn(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.complete(http, anthropic_config(fake), CompletionRequest("once"))
    assert fake.received[-1].body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "once"}]}]
    assert response.text == "echo: once"


async def test_max_tokens_cut_is_finish_reason_length(fake: FakeProvider, http: HttpClient) -> None:
    request = ChatRequest((Message.user("one two three four"),), options={"max_tokens": 2})
    response = await ADAPTER.chat(http, anthropic_config(fake), request)
    assert response.finish_reason == "length"


async def test_embeddings_are_unsupported_with_a_typed_error(http: HttpClient, fake: FakeProvider) -> None:
    with pytest.raises(UnsupportedOperationError, match="'anthropic'.*'embedding'"):
        await ADAPTER.embed(http, anthropic_config(fake), EmbeddingRequest(("x",)))
    assert fake.count() == 0


async def test_overloaded_529_is_retryable_unavailable(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=529))
    with pytest.raises(ProviderUnavailableError) as caught:
        await ADAPTER.chat(http, anthropic_config(fake), ChatRequest((Message.user("x"),)))
    assert caught.value.code == "overloaded_error"
    assert type(caught.value).retryable


async def test_prompt_too_long_is_context_length(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=400, message="prompt is too long: 300000 tokens > 200000 maximum"))
    with pytest.raises(ContextLengthExceededError):
        await ADAPTER.chat(http, anthropic_config(fake), ChatRequest((Message.user("x"),)))


async def test_rate_limit_error_type(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=429, headers={"retry-after": "4"}))
    with pytest.raises(RateLimitError) as caught:
        await ADAPTER.chat(http, anthropic_config(fake), ChatRequest((Message.user("x"),)))
    assert caught.value.retry_after_s == 4.0


async def test_stream_events_give_text_finish_and_usage(fake: FakeProvider, http: HttpClient) -> None:
    chunks = [c async for c in ADAPTER.stream_chat(http, anthropic_config(fake), ChatRequest((Message.user("a b"),)))]
    assert "".join(c.text for c in chunks).strip() == "echo: a b"
    assert chunks[-1].finish_reason == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.input_tokens == 2


async def test_stream_cut_raises_not_a_silent_short_answer(fake: FakeProvider, http: HttpClient) -> None:
    from provmw.errors import ProviderError

    fake.script(Fault(cut_stream_after=3))
    with pytest.raises(ProviderError):
        async for _ in ADAPTER.stream_chat(http, anthropic_config(fake), ChatRequest((Message.user("a b"),))):
            pass
