"""Function calls: synthesized stable ids, several calls in one turn, results mapped back by name and order."""

from __future__ import annotations

import json

import pytest
from provmw_gemini import GeminiAdapter
from provmw_gemini.request import SKIP_SIGNATURE

from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError
from provmw.http import HttpClient
from provmw.messages import Message, ToolCall, ToolSpec
from provmw.requests import ChatRequest
from provmw.testing import FakeProvider

ADAPTER = GeminiAdapter()
WEATHER = ToolSpec(name="weather", description="Weather by city",
                   parameters={"type": "object", "properties": {"query": {"type": "string"}}})
CITIES = ChatRequest((Message.user("Paris\nLyon"),), tools=(WEATHER,))


async def test_several_calls_of_one_function_in_a_turn_get_distinct_ids(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    response = await ADAPTER.chat(client, gemini, CITIES)
    assert [json.loads(c.arguments) for c in response.tool_calls] == [{"query": "Paris"}, {"query": "Lyon"}]
    ids = [c.id for c in response.tool_calls]
    assert len(set(ids)) == 2
    assert all(i.startswith("call_") and len(i) <= 40 for i in ids)


async def test_the_same_answer_gives_the_same_ids(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    first = await ADAPTER.chat(client, gemini, CITIES)
    again = await ADAPTER.chat(client, gemini, CITIES)
    assert [c.id for c in first.tool_calls] == [c.id for c in again.tool_calls]


async def test_a_stream_gives_the_calls_whole_with_the_ids_of_the_unary_answer(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    chunks = [c async for c in ADAPTER.stream_chat(client, gemini, CITIES)]
    streamed = [call for chunk in chunks for call in chunk.tool_calls]
    unary = await ADAPTER.chat(client, gemini, CITIES)
    assert streamed == list(unary.tool_calls)
    assert chunks[-1].finish_reason == "tool_calls"


async def test_results_go_back_named_and_in_the_order_of_the_calls(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    paris, lyon = (await ADAPTER.chat(client, gemini, CITIES)).tool_calls
    history = (Message.user("Paris\nLyon"), Message.assistant(tool_calls=[paris, lyon]),
               Message.tool(lyon.id, "rain"), Message.tool(paris.id, '{"sky": "sunny"}'))
    response = await ADAPTER.chat(client, gemini, ChatRequest(history, tools=(WEATHER,)))
    turn = gemini_fake.received[-1].body["contents"][-1]
    assert turn == {"role": "user", "parts": [
        {"functionResponse": {"name": "weather", "response": {"sky": "sunny"}}},
        {"functionResponse": {"name": "weather", "response": {"output": "rain"}}}]}
    assert response.finish_reason == "stop"


async def test_a_replayed_turn_of_calls_carries_the_documented_skip_signature(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    calls = [ToolCall(id="a", name="weather", arguments='{"query": "Paris"}'),
             ToolCall(id="b", name="weather", arguments='{"query": "Lyon"}')]
    history = (Message.user("x"), Message.assistant(tool_calls=calls), Message.tool("a", "1"), Message.tool("b", "2"))
    await ADAPTER.chat(client, gemini, ChatRequest(history, tools=(WEATHER,)))
    model_turn = gemini_fake.received[-1].body["contents"][1]
    assert [p.get("thoughtSignature") for p in model_turn["parts"]] == [SKIP_SIGNATURE, None]


async def test_a_result_for_a_call_nobody_made_is_refused_before_any_request(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    history = (Message.user("x"), Message.tool("call_nobody", "rain"))
    with pytest.raises(ConfigurationError, match="call_nobody"):
        await ADAPTER.chat(client, gemini, ChatRequest(history, tools=(WEATHER,)))
    assert gemini_fake.count() == 0


@pytest.mark.parametrize(("choice", "config"), [
    ("none", {"mode": "NONE"}), ("required", {"mode": "ANY"}),
    ({"type": "function", "function": {"name": "weather"}}, {"mode": "ANY", "allowedFunctionNames": ["weather"]}),
])
async def test_tool_choice_becomes_the_function_calling_mode(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient, choice: object,
        config: dict[str, object]) -> None:
    request = ChatRequest((Message.user("Paris"),), tools=(WEATHER,), options={"tool_choice": choice})
    await ADAPTER.chat(client, gemini, request)
    assert gemini_fake.received[-1].body["toolConfig"] == {"functionCallingConfig": config}
