"""The OpenAI adapter's Responses wire against the fake provider, and the official SDK reading the same answers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai import AsyncOpenAI

from provmw.errors import (
    ConfigurationError,
    InvalidRequestError,
    MalformedResponseError,
    ProviderUnavailableError,
    RateLimitError,
)
from provmw.http import HttpClient
from provmw.messages import ToolSpec
from provmw.operations.responses_api import FunctionCallOutput, MessageItem, ReasoningItem, ResponsesRequest
from provmw.providers.openai import OpenAIAdapter
from provmw.responses import ChatChunk
from provmw.testing import FakeProvider, Fault
from tests.conftest import openai_config
from tests.hostile import HostileProvider

ADAPTER = OpenAIAdapter()
WEATHER = ToolSpec("weather", "Weather by city", {"type": "object", "properties": {"city": {"type": "string"}},
                                                  "required": ["city"]})
PERSON = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
          "additionalProperties": False}


async def streamed(fake: FakeProvider | HostileProvider, http: HttpClient,
                   request: ResponsesRequest) -> list[ChatChunk]:
    config = openai_config(fake)  # type: ignore[arg-type]  # both serve openai_base_url
    return [chunk async for chunk in ADAPTER.stream_respond(http, config, request)]


async def test_a_response_carries_its_text_id_usage_and_status(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.respond(http, openai_config(fake), ResponsesRequest("hello world", instructions="Be kind"))
    assert (response.text, response.finish_reason, response.status) == ("echo: hello world", "stop", "completed")
    assert response.response_id is not None and response.response_id.startswith("resp_")
    assert (response.usage.input_tokens, response.usage.output_tokens) == (4, 3)
    assert (response.provider, response.served_by, response.model) == ("openai", "oa", "gpt-test")


async def test_the_body_is_the_responses_wire_s(fake: FakeProvider, http: HttpClient) -> None:
    request = ResponsesRequest("hi", instructions="Be kind", tools=[WEATHER], builtin_tools=["web_search"],
                               response_schema=PERSON, options={"max_output_tokens": 64})
    await ADAPTER.respond(http, openai_config(fake), request)
    body = fake.received[-1].body
    assert (fake.received[-1].route, body["instructions"], body["store"], body["max_output_tokens"]) == (
        "responses", "Be kind", False, 64)
    assert body["tools"] == [{"type": "function", "name": "weather", "description": "Weather by city",
                              "parameters": dict(WEATHER.parameters)}, {"type": "web_search"}]
    assert body["text"]["format"] == {"type": "json_schema", "name": "response", "schema": PERSON, "strict": True}
    assert "include" not in body  # a model that does not reason refuses the encrypted reasoning


async def test_chat_s_options_are_sent_in_the_wire_s_names(fake: FakeProvider, http: HttpClient) -> None:
    config = openai_config(fake, options={"max_tokens": 20, "reasoning_effort": "low", "seed": 3,
                                          "response_format": "json_object"})
    await ADAPTER.respond(http, config, ResponsesRequest("hi"))
    body = fake.received[-1].body
    assert (body["max_output_tokens"], body["reasoning"], body["text"]) == (20, {"effort": "low"},
                                                                            {"format": {"type": "json_object"}})
    assert not {"max_tokens", "reasoning_effort", "seed", "response_format"} & set(body)


async def test_a_call_that_may_reason_asks_for_its_reasoning_encrypted(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.respond(http, openai_config(fake), ResponsesRequest("hi", options={
        "reasoning": {"effort": "low"}}))
    assert fake.received[-1].body["include"] == ["reasoning.encrypted_content"]
    reasoning = response.output[0]
    assert isinstance(reasoning, ReasoningItem) and reasoning.encrypted_content
    assert (response.usage.reasoning_tokens, response.text) == (1, "echo: hi")


async def test_items_sent_back_without_a_store_lose_the_ids_the_api_never_kept(fake: FakeProvider,
                                                                                http: HttpClient) -> None:
    first = await ADAPTER.respond(http, openai_config(fake), ResponsesRequest("hi", options={
        "reasoning": {"effort": "low"}}))
    items = [*first.output, ReasoningItem("rs_old", ["an old thought"]), MessageItem("user", "and then?")]
    second = ResponsesRequest(items, options={"reasoning": {"effort": "low"}})
    assert second.needs(streaming=False) >= {"responses"}  # the encrypted reasoning goes back on this wire only
    await ADAPTER.respond(http, openai_config(fake), second)
    sent = fake.received[-1].body["input"]
    assert [(i["type"], i.get("id")) for i in sent] == [("reasoning", "rs_fake"), ("message", None),
                                                        ("message", None)]
    assert sent[0]["encrypted_content"] == first.output[0].to_dict()["encrypted_content"]


async def test_an_option_may_not_replace_what_the_call_writes(fake: FakeProvider, http: HttpClient) -> None:
    with pytest.raises(ConfigurationError, match="model"):
        await ADAPTER.respond(http, openai_config(fake), ResponsesRequest("hi", options={"extra_body": {"model": "x"}}))
    assert fake.count() == 0


async def test_function_calls_are_tool_calls(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.respond(http, openai_config(fake), ResponsesRequest("Paris\nRome", tools=[WEATHER]))
    assert [(c.id, c.name, c.args) for c in response.tool_calls] == [
        ("call_0", "weather", {"city": "Paris"}), ("call_1", "weather", {"city": "Rome"})]
    assert response.finish_reason == "tool_calls"


async def test_a_tool_s_output_sent_back_is_answered(fake: FakeProvider, http: HttpClient) -> None:
    asked = ResponsesRequest("Paris", tools=[WEATHER])
    first = await ADAPTER.respond(http, openai_config(fake), asked)
    follow_up = ResponsesRequest([*asked.input, *first.output, FunctionCallOutput(first.tool_calls[0].id, "sunny")],
                                 tools=[WEATHER])
    answer = await ADAPTER.respond(http, openai_config(fake), follow_up)
    assert answer.text == "echo: Paris (tool said: sunny)"


async def test_a_schema_s_answer_is_its_json_text(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.respond(http, openai_config(fake), ResponsesRequest("Ada", response_schema=PERSON))
    assert json.loads(response.text) == {"name": "echo: Ada"}
    assert response.parsed is None  # the structured_output layer (or the manager) judges it


async def test_a_cut_answer_is_incomplete_with_finish_reason_length(fake: FakeProvider, http: HttpClient) -> None:
    request = ResponsesRequest("one two three four", options={"max_output_tokens": 2})
    response = await ADAPTER.respond(http, openai_config(fake), request)
    assert (response.text, response.status, response.finish_reason) == ("echo: one", "incomplete", "length")


async def test_a_previous_response_never_stored_is_refused(fake: FakeProvider, http: HttpClient) -> None:
    with pytest.raises(InvalidRequestError, match="not found") as raised:
        await ADAPTER.respond(http, openai_config(fake), ResponsesRequest("hi", previous_response_id="resp_nope"))
    assert (raised.value.status, raised.value.code) == (400, "previous_response_not_found")


async def test_a_stored_response_may_be_continued(fake: FakeProvider, http: HttpClient) -> None:
    first = await ADAPTER.respond(http, openai_config(fake), ResponsesRequest("hi", store=True))
    later = await ADAPTER.respond(http, openai_config(fake), ResponsesRequest("again",
                                                                             previous_response_id=first.response_id))
    assert later.text == "echo: again" and fake.received[-1].body["previous_response_id"] == first.response_id


@pytest.mark.parametrize(("status", "error"), [(429, RateLimitError), (500, ProviderUnavailableError),
                                               (400, InvalidRequestError)])
async def test_error_statuses_are_mapped(fake: FakeProvider, http: HttpClient, status: int,
                                         error: type[Exception]) -> None:
    fake.script(Fault(status=status), route="responses")
    with pytest.raises(error):
        await ADAPTER.respond(http, openai_config(fake), ResponsesRequest("hi"))


async def test_a_negative_count_is_a_malformed_answer(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(usage={"input_tokens": -1, "output_tokens": 2}), route="responses")
    with pytest.raises(MalformedResponseError, match="input_tokens"):
        await ADAPTER.respond(http, openai_config(fake), ResponsesRequest("hi"))


async def test_a_stream_reads_as_the_unary_answer(fake: FakeProvider, http: HttpClient) -> None:
    unary = await ADAPTER.respond(http, openai_config(fake), ResponsesRequest("hello big world"))
    chunks = await streamed(fake, http, ResponsesRequest("hello big world"))
    assert "".join(c.text for c in chunks) == unary.text
    assert (chunks[-1].finish_reason, chunks[-1].usage) == ("stop", unary.usage)
    assert fake.received[-1].body["stream"] is True


async def test_a_stream_hands_each_function_call_whole_once(fake: FakeProvider, http: HttpClient) -> None:
    chunks = await streamed(fake, http, ResponsesRequest("Paris\nRome\nOslo", tools=[WEATHER]))
    calls = [c for chunk in chunks for c in chunk.tool_calls]
    assert [(c.id, c.args) for c in calls] == [("call_0", {"city": "Paris"}), ("call_1", {"city": "Rome"}),
                                               ("call_2", {"city": "Oslo"})]
    assert chunks[-1].finish_reason == "tool_calls" and chunks[-1].tool_calls == tuple(calls)


async def test_an_error_event_in_a_stream_is_raised(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(stream_error_after=4), route="responses")
    with pytest.raises(ProviderUnavailableError, match="error event in the stream"):
        await streamed(fake, http, ResponsesRequest("hello world"))


async def test_a_failed_response_event_is_raised(hostile: HostileProvider, http: HttpClient) -> None:
    failed = {"type": "response.failed", "response": {"status": "failed", "error": {
        "code": "server_error", "message": "the model fell over"}}}
    hostile.sse(json.dumps({"type": "response.output_text.delta", "delta": "echo"}), json.dumps(failed))
    with pytest.raises(ProviderUnavailableError, match="fell over"):
        await streamed(hostile, http, ResponsesRequest("hi"))


async def test_a_failed_unary_response_is_raised(hostile: HostileProvider, http: HttpClient) -> None:
    hostile.answer(json.dumps({"id": "resp_1", "status": "failed", "output": [],
                               "error": {"code": "server_error", "message": "the model fell over"}}))
    with pytest.raises(ProviderUnavailableError, match="fell over"):
        await ADAPTER.respond(http, openai_config(hostile), ResponsesRequest("hi"))  # type: ignore[arg-type]


async def test_a_stream_ending_without_response_completed_raises(hostile: HostileProvider, http: HttpClient) -> None:
    hostile.sse(json.dumps({"type": "response.output_text.delta", "delta": "echo"}))
    with pytest.raises(MalformedResponseError, match=r"ended before response\.completed"):
        await streamed(hostile, http, ResponsesRequest("hi"))


async def test_a_malformed_event_is_a_malformed_answer(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(malformed_after=3), route="responses")
    with pytest.raises(MalformedResponseError):
        await streamed(fake, http, ResponsesRequest("hello world"))


def sdk_client(fake: FakeProvider) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=fake.openai_base_url, api_key="sk-test", max_retries=0)


def sdk_tools(tools: list[ToolSpec]) -> list[Any]:
    return [{"type": "function", "name": t.name, "description": t.description, "parameters": dict(t.parameters),
             "strict": False} for t in tools]


async def sdk_unary(fake: FakeProvider, prompt: str, tools: list[ToolSpec]) -> tuple[Any, ...]:
    async with sdk_client(fake) as client:
        answer = await client.responses.create(model="gpt-test", input=prompt, store=False, tools=sdk_tools(tools))
    calls = [(o.call_id, o.name, o.arguments) for o in answer.output if o.type == "function_call"]
    usage = answer.usage
    assert usage is not None
    return answer.output_text, calls, (usage.input_tokens, usage.output_tokens), answer.id


async def sdk_stream(fake: FakeProvider, prompt: str, tools: list[ToolSpec]) -> tuple[Any, ...]:
    text, calls, last = [], [], None
    async with sdk_client(fake) as client:
        events = await client.responses.create(model="gpt-test", input=prompt, store=False, tools=sdk_tools(tools),
                                               stream=True)
        async for event in events:
            if event.type == "response.output_text.delta":
                text.append(event.delta)
            elif event.type == "response.output_item.done" and event.item.type == "function_call":
                calls.append((event.item.call_id, event.item.name, event.item.arguments))
            elif event.type == "response.completed":
                last = event.response
    assert last is not None and last.usage is not None
    return "".join(text), calls, (last.usage.input_tokens, last.usage.output_tokens), last.id


async def provmw_read(fake: FakeProvider, http: HttpClient, prompt: str, tools: list[ToolSpec],
                      stream: bool) -> tuple[Any, ...]:
    request = ResponsesRequest(prompt, tools=tools)
    if not stream:
        answer = await ADAPTER.respond(http, openai_config(fake), request)
        calls = [(c.id, c.name, c.arguments) for c in answer.tool_calls]
        return answer.text, calls, (answer.usage.input_tokens, answer.usage.output_tokens), answer.response_id
    unary = await ADAPTER.respond(http, openai_config(fake), request)  # a stream's chunks carry no id
    chunks = await streamed(fake, http, request)
    usage = chunks[-1].usage
    assert usage is not None
    calls = [(c.id, c.name, c.arguments) for chunk in chunks for c in chunk.tool_calls]
    return "".join(c.text for c in chunks), calls, (usage.input_tokens, usage.output_tokens), unary.response_id


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("prompt", "tools"), [("tell me a story", []), ("Paris\nRome\nParis", [WEATHER])])
async def test_the_sdk_and_provmw_read_the_same_answer(fake: FakeProvider, http: HttpClient, prompt: str,
                                                       tools: list[ToolSpec], stream: bool) -> None:
    sdk = await (sdk_stream if stream else sdk_unary)(fake, prompt, tools)
    ours = await provmw_read(fake, http, prompt, tools, stream)
    assert ours == sdk
    assert len(ours[1]) == (3 if tools else 0) and ours[3].startswith("resp_")


def searched(calls: int) -> str:
    """An answer of ``calls`` web search items and a message."""
    items: list[dict[str, Any]] = [{"type": "web_search_call", "id": f"ws_{i}", "status": "completed"}
                                   for i in range(calls)]
    items.append({"type": "message", "id": "m", "role": "assistant",
                  "content": [{"type": "output_text", "text": "sunny", "annotations": []}]})
    return json.dumps({"id": "r", "status": "completed", "output": items,
                       "usage": {"input_tokens": 5, "output_tokens": 1}})


async def test_built_in_tool_calls_are_billed_units_and_max_tool_calls_is_sent(hostile: HostileProvider,
                                                                               http: HttpClient) -> None:
    hostile.answer(searched(2))
    request = ResponsesRequest("weather?", builtin_tools=["web_search"], options={"max_tool_calls": 3})
    response = await ADAPTER.respond(http, openai_config(hostile), request)  # type: ignore[arg-type]
    assert dict(response.usage.units) == {"web_search_call": 2.0}
    assert json.loads(hostile.requests[-1].body)["max_tool_calls"] == 3


async def test_more_tool_calls_than_max_tool_calls_are_malformed(hostile: HostileProvider, http: HttpClient) -> None:
    hostile.answer(searched(4))
    request = ResponsesRequest("weather?", builtin_tools=["web_search"], options={"max_tool_calls": 3})
    with pytest.raises(MalformedResponseError, match="4 web_search_call"):
        await ADAPTER.respond(http, openai_config(hostile), request)  # type: ignore[arg-type]


async def test_a_configurations_extra_body_may_not_continue_a_stored_response(fake: FakeProvider,
                                                                             http: HttpClient) -> None:
    config = openai_config(fake, options={"extra_body": {"previous_response_id": "resp_1"}})
    with pytest.raises(ConfigurationError, match="previous_response_id"):
        await ADAPTER.respond(http, config, ResponsesRequest("hi"))
    assert fake.count() == 0


async def test_a_streams_last_chunk_carries_the_built_in_tools_units(hostile: HostileProvider,
                                                                     http: HttpClient) -> None:
    completed = {"type": "response.completed", "response": json.loads(searched(1))}
    hostile.sse(json.dumps({"type": "response.output_text.delta", "delta": "sunny"}), json.dumps(completed))
    chunks = await streamed(hostile, http, ResponsesRequest("weather?", builtin_tools=["web_search"],
                                                            options={"max_tool_calls": 1}))
    assert chunks[-1].usage is not None and dict(chunks[-1].usage.units) == {"web_search_call": 1.0}


async def test_a_code_interpreter_container_is_billed_though_no_code_ran(hostile: HostileProvider,
                                                                        http: HttpClient) -> None:
    hostile.answer(searched(0))
    request = ResponsesRequest("2+2?", builtin_tools=["code_interpreter"], options={"max_tool_calls": 1})
    response = await ADAPTER.respond(http, openai_config(hostile), request)  # type: ignore[arg-type]
    assert dict(response.usage.units) == {"code_interpreter_session": 1.0}
