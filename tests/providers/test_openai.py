from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from provmw.config import ProviderConfig
from provmw.http import HttpClient
from provmw.messages import ImagePart, Message, TextPart, ToolCall, ToolSpec
from provmw.providers.openai import OpenAIAdapter
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest
from provmw.responses import Usage
from provmw.testing import AdapterConformance, FakeProvider, Fault
from tests.conftest import SENTINEL_KEY, openai_config

ADAPTER = OpenAIAdapter()
WEATHER = ToolSpec(name="weather", description="Weather by city",
                   parameters={"type": "object", "properties": {"city": {"type": "string"}}})


async def test_chat_request_shape(fake: FakeProvider, http: HttpClient) -> None:
    request = ChatRequest((Message.system("be brief"), Message.user("hi")), options={"max_tokens": 5})
    await ADAPTER.chat(http, openai_config(fake, options={"temperature": 0.2}), request)
    sent = fake.received[-1]
    assert sent.body == {"model": "gpt-test", "messages": [{"role": "system", "content": "be brief"},
                                                           {"role": "user", "content": "hi"}],
                         "temperature": 0.2, "max_tokens": 5}
    assert sent.headers["Authorization"] == f"Bearer {SENTINEL_KEY}"


async def test_tools_request_shape_and_tool_call_answer(fake: FakeProvider, http: HttpClient) -> None:
    request = ChatRequest((Message.user("Paris"),), tools=(WEATHER,), options={"tool_choice": "auto"})
    response = await ADAPTER.chat(http, openai_config(fake), request)
    assert fake.received[-1].body["tools"] == [{"type": "function", "function": {
        "name": "weather", "description": "Weather by city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    assert fake.received[-1].body["tool_choice"] == "auto"
    assert response.tool_calls == (ToolCall(id="call_0", name="weather", arguments='{"city": "Paris"}'),)


async def test_tool_results_shape(fake: FakeProvider, http: HttpClient) -> None:
    call = ToolCall(id="call_0", name="weather", arguments='{"city": "Paris"}')
    history = (Message.user("Paris"), Message.assistant(tool_calls=[call]), Message.tool("call_0", "sunny"))
    await ADAPTER.chat(http, openai_config(fake), ChatRequest(history, tools=(WEATHER,)))
    messages = fake.received[-1].body["messages"]
    assert messages[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]}
    assert messages[2] == {"role": "tool", "tool_call_id": "call_0", "content": "sunny"}


async def test_vision_parts_by_url_and_base64(fake: FakeProvider, http: HttpClient) -> None:
    parts = (TextPart("what?"), ImagePart(url="https://x.test/a.png"), ImagePart(data=b"abc", media_type="image/jpeg"))
    await ADAPTER.chat(http, openai_config(fake), ChatRequest((Message.user(parts),)))
    assert fake.received[-1].body["messages"][0]["content"] == [
        {"type": "text", "text": "what?"},
        {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,YWJj"}}]


async def test_completion(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.complete(http, openai_config(fake), CompletionRequest("once upon"))
    assert fake.received[-1].body == {"model": "gpt-test", "prompt": "once upon"}
    assert response.text == "echo: once upon"


async def test_chat_and_completion_report_the_providers_answer_id(fake: FakeProvider, http: HttpClient) -> None:
    chat = await ADAPTER.chat(http, openai_config(fake), ChatRequest((Message.user("hi"),)))
    completion = await ADAPTER.complete(http, openai_config(fake), CompletionRequest("once upon"))
    assert (chat.response_id, completion.response_id) == ("chatcmpl-fake", "cmpl-fake")


async def test_embeddings_batched_with_dimensions(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.embed(http, openai_config(fake), EmbeddingRequest(("a", "b", "c"), dimensions=3))
    assert fake.received[-1].body == {"model": "gpt-test", "input": ["a", "b", "c"],
                                      "encoding_format": "float", "dimensions": 3}
    assert [len(v) for v in response.vectors] == [3, 3, 3]


async def test_extra_headers_and_extra_body_are_sent(fake: FakeProvider, http: HttpClient) -> None:
    config = openai_config(fake, headers={"HTTP-Referer": "https://app.test"},
                           options={"extra_body": {"provider": {"order": ["x"]}}})
    await ADAPTER.chat(http, config, ChatRequest((Message.user("hi"),)))
    assert fake.received[-1].headers["HTTP-Referer"] == "https://app.test"
    assert fake.received[-1].body["provider"] == {"order": ["x"]}


async def test_stream_asks_for_usage(fake: FakeProvider, http: HttpClient) -> None:
    async for _ in ADAPTER.stream_chat(http, openai_config(fake), ChatRequest((Message.user("a b c"),))):
        pass
    assert fake.received[-1].body["stream"] is True
    assert fake.received[-1].body["stream_options"] == {"include_usage": True}


def test_chat_body_is_plain_json() -> None:
    from provmw.config import ProviderConfig

    config = ProviderConfig(identifier="x", provider="openai", model="m", options={"response_format": "json_object"})
    body = ADAPTER.chat_body(config, ChatRequest((Message.user("hi"),), tools=(WEATHER,)))
    assert json.loads(json.dumps(body))["response_format"] == {"type": "json_object"}


class TestOpenAIConformance(AdapterConformance):
    adapter = OpenAIAdapter()
    usage_with_cache = ({"prompt_tokens": 2000, "completion_tokens": 900,
                         "prompt_tokens_details": {"cached_tokens": 1536, "cache_write_tokens": 200},
                         "completion_tokens_details": {"reasoning_tokens": 640}},
                        Usage(input_tokens=2000, output_tokens=900, cached_input_tokens=1536,
                              cache_write_5m_tokens=200, reasoning_tokens=640))
    retry_hints: ClassVar[Mapping[str, tuple[Fault, float]]] = {
        **AdapterConformance.retry_hints,
        "retry-after-ms": (Fault(status=429, headers={"retry-after-ms": "1500"}), 1.5),
    }

    def config(self, fake: FakeProvider, **fields: Any) -> ProviderConfig:
        return ProviderConfig(identifier="oa", provider="openai", model="gpt-test",
                              base_url=fake.openai_base_url, **fields)


async def test_a_response_schema_goes_as_a_strict_json_schema_named_by_its_title(
        fake: FakeProvider, http: HttpClient) -> None:
    schema = {"title": "Forecast", "type": "object", "properties": {"city": {"type": "string"}}}
    await ADAPTER.chat(http, openai_config(fake), ChatRequest((Message.user("Paris"),), response_schema=schema))
    assert fake.received[-1].body["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "Forecast", "schema": schema, "strict": True}}


def test_a_title_that_is_no_valid_name_names_it_response() -> None:
    schema = {"title": "A forecast!", "type": "object"}
    body = ADAPTER.chat_body(openai_config_for_body(), ChatRequest((Message.user("x"),), response_schema=schema))
    assert body["response_format"]["json_schema"]["name"] == "response"


def openai_config_for_body() -> ProviderConfig:
    return ProviderConfig(identifier="oa", provider="openai", model="gpt-test")
