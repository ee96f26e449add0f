from __future__ import annotations

import pytest

from provmw.errors import ProviderUnavailableError
from provmw.http import HttpClient
from provmw.messages import ImagePart, Message, TextPart, ToolCall, ToolSpec
from provmw.providers.anthropic import DEFAULT_MAX_TOKENS, AnthropicAdapter
from provmw.requests import ChatRequest, CompletionRequest
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
    await ADAPTER.chat(http, anthropic_config(fake), ChatRequest((Message.user(parts),)))
    assert fake.received[-1].body["messages"][0]["content"][1:] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "YWJj"}},
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}]


async def test_completion_is_one_user_turn(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.complete(http, anthropic_config(fake), CompletionRequest("once"))
    assert fake.received[-1].body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "once"}]}]
    assert response.text == "echo: once"


async def test_chat_and_completion_report_the_providers_message_id(fake: FakeProvider, http: HttpClient) -> None:
    chat = await ADAPTER.chat(http, anthropic_config(fake), ChatRequest((Message.user("hi"),)))
    completion = await ADAPTER.complete(http, anthropic_config(fake), CompletionRequest("once"))
    assert (chat.response_id, completion.response_id) == ("msg_fake", "msg_fake")


async def test_max_tokens_cut_is_finish_reason_length(fake: FakeProvider, http: HttpClient) -> None:
    request = ChatRequest((Message.user("one two three four"),), options={"max_tokens": 2})
    response = await ADAPTER.chat(http, anthropic_config(fake), request)
    assert response.finish_reason == "length"


async def test_the_error_type_travels_as_the_code(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=529))
    with pytest.raises(ProviderUnavailableError) as caught:
        await ADAPTER.chat(http, anthropic_config(fake), ChatRequest((Message.user("x"),)))
    assert caught.value.code == "overloaded_error"
