from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from provmw.config import ProviderConfig
from provmw.errors import (
    ContextLengthExceededError,
    ProviderError,
    ProviderUnavailableError,
    UnsupportedOperationError,
)
from provmw.http import HttpClient
from provmw.messages import ImagePart, Message, TextPart, ToolCall, ToolSpec
from provmw.providers.anthropic import ANSWER_TOOL, DEFAULT_MAX_TOKENS, AnthropicAdapter
from provmw.requests import ChatRequest
from provmw.responses import Usage
from provmw.testing import AdapterConformance, FakeProvider, Fault
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


async def test_chat_reports_the_providers_message_id(fake: FakeProvider, http: HttpClient) -> None:
    chat = await ADAPTER.chat(http, anthropic_config(fake), ChatRequest((Message.user("hi"),)))
    assert chat.response_id == "msg_fake"


async def test_max_tokens_cut_is_finish_reason_length(fake: FakeProvider, http: HttpClient) -> None:
    request = ChatRequest((Message.user("one two three four"),), options={"max_tokens": 2})
    response = await ADAPTER.chat(http, anthropic_config(fake), request)
    assert response.finish_reason == "length"


async def test_the_error_type_travels_as_the_code(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=529))
    with pytest.raises(ProviderUnavailableError) as caught:
        await ADAPTER.chat(http, anthropic_config(fake), ChatRequest((Message.user("x"),)))
    assert caught.value.code == "overloaded_error"


class TestAnthropicConformance(AdapterConformance):
    adapter = AnthropicAdapter()
    usage_with_cache = ({"input_tokens": 50, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 700,
                         "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 400},
                         "output_tokens": 80},
                        Usage(input_tokens=1750, output_tokens=80, cached_input_tokens=1000,
                              cache_write_5m_tokens=300, cache_write_1h_tokens=400))
    status_errors: ClassVar[Mapping[int, type[ProviderError]]] = {
        **AdapterConformance.status_errors, 529: ProviderUnavailableError}
    coded_errors: ClassVar[Mapping[str, tuple[Fault, type[ProviderError]]]] = {
        **AdapterConformance.coded_errors,
        # Anthropic says so in the message of an invalid_request_error.
        "context_length": (Fault(status=400, code="invalid_request_error",
                                 message="prompt is too long: 300000 tokens > 200000 maximum"),
                           ContextLengthExceededError),
        "overloaded": (Fault(status=529, code="overloaded_error"), ProviderUnavailableError),
    }
    def config(self, fake: FakeProvider, **fields: Any) -> ProviderConfig:
        return ProviderConfig(identifier="an", provider="anthropic", model="claude-test",
                              base_url=fake.anthropic_base_url, **fields)


FORECAST = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


async def test_a_response_schema_is_a_forced_tool_whose_input_is_the_text(fake: FakeProvider, http: HttpClient) -> None:
    request = ChatRequest((Message.user("Paris"),), response_schema=FORECAST)
    response = await ADAPTER.chat(http, anthropic_config(fake), request)
    body = fake.received[-1].body
    assert body["tool_choice"] == {"type": "tool", "name": ANSWER_TOOL}
    assert body["tools"][-1]["input_schema"] == FORECAST
    assert json.loads(response.text) == {"city": "echo: Paris"}


def test_with_tools_of_its_own_the_model_must_call_one_or_answer() -> None:
    request = ChatRequest((Message.user("Paris"),), tools=(WEATHER,), response_schema=FORECAST)
    body = ADAPTER.chat_body(ProviderConfig(identifier="an", provider="anthropic", model="c"), request)
    assert body["tool_choice"] == {"type": "any"}
    assert [t["name"] for t in body["tools"]] == ["weather", ANSWER_TOOL]


async def test_response_format_is_refused_before_anything_is_sent(fake: FakeProvider, http: HttpClient) -> None:
    request = ChatRequest((Message.user("hi"),), options={"response_format": {"type": "json_object"}})
    with pytest.raises(UnsupportedOperationError, match="response_format"):
        await ADAPTER.chat(http, anthropic_config(fake), request)
    assert fake.count() == 0
