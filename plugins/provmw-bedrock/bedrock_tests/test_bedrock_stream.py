"""ConverseStream: event-stream messages into chunks, and every way a stream can go wrong."""

from __future__ import annotations

import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from provmw_bedrock import BedrockAdapter
from provmw_bedrock.adapter import EVENT_STREAM
from provmw_bedrock.answers import finish_reason
from provmw_bedrock.eventstream import MAX_HEADERS, encode_message
from provmw_bedrock.fake import converse_answer, converse_events, event_frame

from provmw.config import ProviderConfig
from provmw.errors import (
    ContextLengthExceededError,
    MalformedResponseError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
    ResponseTooLargeError,
    StreamTooLargeError,
)
from provmw.http import HttpClient, ReadLimits
from provmw.messages import Message, ToolSpec
from provmw.requests import ChatRequest
from provmw.responses import ChatChunk
from provmw.testing import FakeProvider, Fault, words

ADAPTER = BedrockAdapter()
HELLO = ChatRequest((Message.user("hello world"),))
HELLO_MANY = ChatRequest((Message.user("one two three four five six seven eight nine ten"),))
HELLO_BODY = {"messages": [{"role": "user", "content": [{"text": "hello world"}]}]}
LOOKUP = ToolSpec(name="lookup", description="Look a word up", parameters={"type": "object"})




async def chunks(fake: FakeProvider | str, request: ChatRequest = HELLO,
                 limits: ReadLimits | None = None) -> list[ChatChunk]:
    http = HttpClient(limits=limits)
    url = fake if isinstance(fake, str) else fake.url
    config = ProviderConfig(identifier="b", provider="bedrock", model="anthropic.claude-v2", base_url=url)
    try:
        return [chunk async for chunk in ADAPTER.stream_chat(http, config, request)]
    finally:
        await http.aclose()


async def test_several_streamed_calls_of_one_tool_come_out_whole(fake: FakeProvider) -> None:
    got = await chunks(fake, ChatRequest((Message.user("alpha\nbeta\ngamma"),), tools=(LOOKUP,)))
    calls = [call for chunk in got for call in chunk.tool_calls]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("lookup", {"query": q}) for q in
                                                                   ("alpha", "beta", "gamma")]
    assert got[-1].finish_reason == "tool_calls"


async def test_a_streamed_schema_answer_is_text(fake: FakeProvider) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    got = await chunks(fake, ChatRequest((Message.user("hi"),), response_schema=schema))
    assert json.loads("".join(c.text for c in got)) == {"answer": "echo: hi"}
    assert (got[-1].finish_reason, [c for c in got if c.tool_calls]) == ("stop", [])


async def test_streamed_usage_counts_the_cache(fake: FakeProvider) -> None:
    fake.script(Fault(usage={"inputTokens": 3, "outputTokens": 3, "totalTokens": 56, "cacheReadInputTokens": 50}))
    usage = (await chunks(fake))[-1].usage
    assert usage is not None
    assert (usage.input_tokens, usage.cached_input_tokens) == (53, 50)


@pytest.mark.parametrize(("fault", "error"), [
    (Fault(stream_error_after=2), ProviderUnavailableError),
    (Fault(stream_error_after=2, code="throttlingException"), RateLimitError),
    (Fault(stream_error_after=0, code="validationException", message="Input is too long for requested model."),
     ContextLengthExceededError),
    (Fault(stream_error_after=1, code="modelStreamErrorException"), ProviderUnavailableError),
], ids=["default", "throttling", "context_length", "model_stream_error"])
async def test_an_exception_message_maps_onto_the_tree(
        fake: FakeProvider, fault: Fault, error: type[ProviderError]) -> None:
    fake.script(fault)
    with pytest.raises(ProviderError) as caught:
        await chunks(fake)
    assert type(caught.value) is error
    assert fault.message in str(caught.value)


async def test_a_frame_with_a_bad_checksum_is_malformed(fake: FakeProvider) -> None:
    fake.script(Fault(malformed_after=2))
    with pytest.raises(MalformedResponseError, match="checksum"):
        await chunks(fake)


async def test_a_stream_that_ends_cleanly_without_its_usage_raises() -> None:
    frames = [event_frame(kind, data) for kind, data in converse_events(converse_answer(HELLO_BODY, words))]

    async def without_metadata(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": EVENT_STREAM})
        await response.prepare(request)
        await response.write(b"".join(frames[:-1]))
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/model/{model}/converse-stream", without_metadata)
    async with TestServer(app, host="127.0.0.1") as server:
        with pytest.raises(MalformedResponseError, match="messageStop and metadata"):
            await chunks(str(server.make_url("")).rstrip("/"))


async def test_a_message_over_max_event_bytes_is_refused(fake: FakeProvider) -> None:
    with pytest.raises(ResponseTooLargeError):
        await chunks(fake, limits=ReadLimits(max_event_bytes=64))


async def test_a_stalled_stream_times_out_at_stream_idle_s(fake: FakeProvider) -> None:
    fake.script(Fault(stall_after=1, stall_s=30))
    with pytest.raises(ProviderTimeoutError, match="stream_idle_s"):
        await chunks(fake, limits=ReadLimits(stream_idle_s=0.05))


@pytest.mark.parametrize(("reason", "normalised"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"),
    ("model_context_window_exceeded", "length"), ("tool_use", "tool_calls"),
    ("guardrail_intervened", "content_filter"), ("content_filtered", "content_filter")])
def test_stop_reasons_are_normalised(reason: str, normalised: str) -> None:
    assert finish_reason(reason, "m") == normalised


@pytest.mark.parametrize("reason", ["malformed_model_output", "malformed_tool_use"])
def test_malformed_output_stop_reasons_raise(reason: str) -> None:
    with pytest.raises(MalformedResponseError, match=reason):
        finish_reason(reason, "m")


async def test_a_message_of_too_many_headers_is_a_malformed_answer() -> None:
    flood = encode_message({f"h{i}": True for i in range(MAX_HEADERS * 100)}, b"{}")

    async def many_headers(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": EVENT_STREAM})
        await response.prepare(request)
        await response.write(flood)
        return response

    app = web.Application()
    app.router.add_post("/model/{model}/converse-stream", many_headers)
    async with TestServer(app, host="127.0.0.1") as server:
        with pytest.raises(MalformedResponseError, match=f"more than {MAX_HEADERS} headers"):
            await chunks(str(server.make_url("")).rstrip("/"))


async def test_a_stream_past_max_stream_bytes_is_a_stream_too_large_error(fake: FakeProvider) -> None:
    with pytest.raises(StreamTooLargeError, match=r"\[http\] max_stream_bytes") as caught:
        await chunks(fake, HELLO_MANY, limits=ReadLimits(max_stream_bytes=512))
    assert caught.value.limit_bytes == 512
