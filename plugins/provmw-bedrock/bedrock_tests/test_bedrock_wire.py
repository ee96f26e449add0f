"""Bedrock's Converse wire: what the adapter sends, and how it reads answers, usage and errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from provmw_bedrock import BedrockAdapter
from provmw_bedrock.converse import SCHEMA_TOOL

from provmw.config import ProviderConfig
from provmw.errors import InvalidRequestError, MalformedResponseError
from provmw.http import HttpClient
from provmw.messages import ImagePart, Message, TextPart, ToolSpec
from provmw.requests import ChatRequest
from provmw.testing import FakeProvider, Fault

ADAPTER = BedrockAdapter()
WEATHER = ToolSpec(name="weather", description="Weather by city",
                   parameters={"type": "object", "properties": {"city": {"type": "string"}}})
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}, "score": {"type": "integer"}},
          "required": ["answer", "score"]}






def config(fake: FakeProvider, **options: Any) -> ProviderConfig:
    return ProviderConfig(identifier="b", provider="bedrock", model="anthropic.claude-v2", base_url=fake.url,
                          options=options)


async def test_system_prompts_and_inference_options_take_their_fields(fake: FakeProvider, http: HttpClient) -> None:
    request = ChatRequest((Message("system", "be brief"), Message.user("hi")),
                          options={"temperature": 0.2, "top_p": 0.9, "stop": "END"})
    await ADAPTER.chat(http, config(fake, max_tokens=50, top_k=5), request)
    body = fake.received[-1].body
    assert body["system"] == [{"text": "be brief"}]
    assert body["inferenceConfig"] == {"maxTokens": 50, "temperature": 0.2, "topP": 0.9, "stopSequences": ["END"]}
    assert body["additionalModelRequestFields"] == {"top_k": 5}


async def test_images_go_as_base64_bytes_with_their_format(fake: FakeProvider, http: HttpClient) -> None:
    parts = (TextPart("what?"), ImagePart(data=b"\x89PNG", media_type="image/jpeg"))
    await ADAPTER.chat(http, config(fake), ChatRequest((Message.user(parts),)))
    image = fake.received[-1].body["messages"][0]["content"][1]["image"]
    assert image == {"format": "jpeg", "source": {"bytes": "iVBORw=="}}


async def test_a_web_image_url_is_refused_before_any_request(fake: FakeProvider, http: HttpClient) -> None:
    request = ChatRequest((Message.user((TextPart("what?"), ImagePart(url="https://x.test/a.png"))),))
    with pytest.raises(InvalidRequestError, match="s3://"):
        await ADAPTER.chat(http, config(fake), request)
    assert fake.count() == 0


async def test_several_tool_calls_in_one_turn_come_back_in_order(fake: FakeProvider, http: HttpClient) -> None:
    request = ChatRequest((Message.user("Paris\nLyon\nNice"),), tools=(WEATHER,))
    response = await ADAPTER.chat(http, config(fake), request)
    assert [json.loads(c.arguments)["query"] for c in response.tool_calls] == ["Paris", "Lyon", "Nice"]
    assert len({c.id for c in response.tool_calls}) == 3


async def test_tool_history_goes_as_tool_use_and_tool_result_blocks(fake: FakeProvider, http: HttpClient) -> None:
    first = await ADAPTER.chat(http, config(fake), ChatRequest((Message.user("Paris"),), tools=(WEATHER,)))
    call = first.tool_calls[0]
    history = (Message.user("Paris"), Message.assistant(tool_calls=[call]), Message.tool(call.id, "sunny"))
    await ADAPTER.chat(http, config(fake, tool_choice="required"), ChatRequest(history, tools=(WEATHER,)))
    body = fake.received[-1].body
    assert body["messages"][1]["content"] == [{"toolUse": {"toolUseId": call.id, "name": "weather",
                                                           "input": {"query": "Paris"}}}]
    assert body["messages"][2]["content"] == [{"toolResult": {"toolUseId": call.id, "content": [{"text": "sunny"}]}}]
    assert body["toolConfig"]["toolChoice"] == {"any": {}}


async def test_a_response_schema_is_a_forced_tool_whose_input_is_the_answer(
        fake: FakeProvider, http: HttpClient) -> None:
    request = ChatRequest((Message.user("rate it"),), response_schema=SCHEMA)
    response = await ADAPTER.chat(http, config(fake), request)
    assert fake.received[-1].body["toolConfig"]["toolChoice"] == {"tool": {"name": SCHEMA_TOOL}}
    assert json.loads(response.text) == {"answer": "echo: rate it", "score": 0}
    assert (response.tool_calls, response.finish_reason) == ((), "stop")


async def test_cache_reads_and_writes_count_as_input(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(usage={"inputTokens": 10, "outputTokens": 4, "totalTokens": 1514, "cacheReadInputTokens": 1000,
                             "cacheWriteInputTokens": 500, "cacheDetails": [{"ttl": "1h", "inputTokens": 200}]}))
    usage = (await ADAPTER.chat(http, config(fake), ChatRequest((Message.user("hi"),)))).usage
    assert (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens) == (1510, 4, 1000)
    assert (usage.cache_write_5m_tokens, usage.cache_write_1h_tokens) == (300, 200)


@pytest.mark.parametrize("usage", [{"inputTokens": -1}, {"inputTokens": 1, "outputTokens": "3"},
                                   {"cacheWriteInputTokens": 5, "cacheDetails": [{"ttl": "1h", "inputTokens": 9}]}])
async def test_an_impossible_usage_is_a_malformed_answer(
        fake: FakeProvider, http: HttpClient, usage: dict[str, Any]) -> None:
    fake.script(Fault(usage=usage))
    with pytest.raises(MalformedResponseError):
        await ADAPTER.chat(http, config(fake), ChatRequest((Message.user("hi"),)))


async def test_max_tokens_stops_with_length(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.chat(http, config(fake, max_tokens=2), ChatRequest((Message.user("a b c d"),)))
    assert (response.text, response.finish_reason) == ("echo: a", "length")
