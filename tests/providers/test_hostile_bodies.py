"""Finding 5 of the security review: every malformed body is a ``MalformedResponseError``.

Each shape is served raw by the hostile provider over real HTTP, to both adapters, unary and
streamed; none may pass as an answer or escape as ``ValueError``, ``RecursionError``, etc.
"""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provmw.config import ProviderConfig
from provmw.errors import MalformedResponseError, ProviderError
from provmw.http import HttpClient, decode_json
from provmw.messages import Message
from provmw.providers.anthropic import AnthropicAdapter
from provmw.providers.openai import OpenAIAdapter
from provmw.requests import ChatRequest, EmbeddingRequest
from tests.hostile import HostileProvider

CHAT = ChatRequest((Message.user("hi"),))
DEEP = "[" * 100_000 + "]" * 100_000
HUGE_INT = "9" * 5_000


def openai(hostile: HostileProvider) -> ProviderConfig:
    return ProviderConfig(identifier="h", provider="openai", model="m", base_url=hostile.openai_base_url)


def anthropic(hostile: HostileProvider) -> ProviderConfig:
    return ProviderConfig(identifier="a", provider="anthropic", model="c", base_url=hostile.anthropic_base_url)


def oa_chat(message: str = '{"content": "x"}', choice: str = "", top: str = "") -> str:
    return f'{{"choices": [{{"message": {message}{choice}}}]{top}}}'


OPENAI_CHAT = {
    "usage-text": oa_chat(top=', "usage": {"prompt_tokens": "abc"}'),
    "usage-1e400": oa_chat(top=', "usage": {"prompt_tokens": 1e400}'),
    "usage-nan": oa_chat(top=', "usage": {"prompt_tokens": NaN}'),
    "usage-huge-int": oa_chat(top=f', "usage": {{"prompt_tokens": {HUGE_INT}}}'),
    "content-nan": oa_chat('{"content": NaN}'),
    "content-infinity": oa_chat('{"content": -Infinity}'),
    "content-number": oa_chat('{"content": 123}'),
    "content-object": oa_chat('{"content": {"text": "x"}}'),
    "deep": DEEP,
    "not-an-object": "[1, 2]",
    "choices-text": '{"choices": "x"}',
    "choices-empty": '{"choices": []}',
    "choices-missing": "{}",
    "choice-number": '{"choices": [1]}',
    "message-text": oa_chat('"x"'),
    "message-missing": '{"choices": [{"finish_reason": "stop"}]}',
    "tool-calls-text": oa_chat('{"content": null, "tool_calls": "x"}'),
    "tool-call-id-number": oa_chat('{"tool_calls": [{"id": 1, "function": {"name": "f", "arguments": "{}"}}]}'),
    "tool-call-function-text": oa_chat('{"tool_calls": [{"id": "c", "function": "f"}]}'),
    "tool-call-arguments-object": oa_chat('{"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}]}'),
    "finish-reason-number": oa_chat(choice=', "finish_reason": 123'),
    "model-number": oa_chat(top=', "model": 5'),
    "id-number": oa_chat(top=', "id": 5'),
}

OPENAI_EMBEDDINGS = {
    "vector-text": '{"data": [{"index": 0, "embedding": ["a"]}]}',
    "vector-nan": '{"data": [{"index": 0, "embedding": [0.1, NaN]}]}',
    "vector-1e400": '{"data": [{"index": 0, "embedding": [0.1, 1e400]}]}',
    "vector-boolean": '{"data": [{"index": 0, "embedding": [true]}]}',
    "vector-text-whole": '{"data": [{"index": 0, "embedding": "0.1,0.2"}]}',
    "index-text": '{"data": [{"index": "0", "embedding": [0.1]}]}',
    "index-missing": '{"data": [{"embedding": [0.1]}]}',
    "rows-missing": '{"data": []}',
    "index-twice": '{"data": [{"index": 0, "embedding": [0.1]}, {"index": 0, "embedding": [0.2]}]}',
    "data-text": '{"data": "x"}',
}

OPENAI_STREAM = {
    "not-an-object": "[1]",
    "choices-text": '{"choices": "x"}',
    "choice-number": '{"choices": [1]}',
    "delta-text": '{"choices": [{"delta": "x"}]}',
    "content-number": '{"choices": [{"delta": {"content": 123}}]}',
    "finish-reason-number": '{"choices": [{"delta": {}, "finish_reason": 5}]}',
    "usage-text": '{"choices": [], "usage": {"prompt_tokens": "abc"}}',
    "nan": '{"choices": [{"delta": {"content": NaN}}]}',
    "deep": DEEP,
}


def an_chat(content: str = '[{"type": "text", "text": "x"}]', top: str = "") -> str:
    return f'{{"content": {content}{top}}}'


ANTHROPIC_CHAT = {
    "usage-text": an_chat(top=', "usage": {"input_tokens": "abc"}'),
    "usage-1e400": an_chat(top=', "usage": {"input_tokens": 1e400}'),
    "usage-nan": an_chat(top=', "usage": {"output_tokens": NaN}'),
    "usage-not-an-object": an_chat(top=', "usage": "abc"'),
    "content-number": an_chat("123"),
    "content-text": an_chat('"x"'),
    "content-missing": "{}",
    "block-number": an_chat("[1]"),
    "block-type-number": an_chat('[{"type": 1}]'),
    "text-number": an_chat('[{"type": "text", "text": 123}]'),
    "text-nan": an_chat('[{"type": "text", "text": NaN}]'),
    "tool-id-number": an_chat('[{"type": "tool_use", "id": 1, "name": "f", "input": {}}]'),
    "tool-input-text": an_chat('[{"type": "tool_use", "id": "t", "name": "f", "input": "x"}]'),
    "stop-reason-number": an_chat(top=', "stop_reason": 5'),
    "model-number": an_chat(top=', "model": []'),
    "id-object": an_chat(top=', "id": {}'),
    "deep": DEEP,
    "not-an-object": '"x"',
}

ANTHROPIC_STREAM = {
    "not-an-object": "[1]",
    "type-number": '{"type": 5}',
    "message-text": '{"type": "message_start", "message": "x"}',
    "usage-list": '{"type": "message_start", "message": {"usage": [1, 2]}}',
    "delta-text": '{"type": "content_block_delta", "delta": "x"}',
    "text-number": '{"type": "content_block_delta", "delta": {"type": "text_delta", "text": 123}}',
    "stop-reason-number": '{"type": "message_delta", "delta": {"stop_reason": 5}, "usage": {"output_tokens": 1}}',
    "usage-1e400": '{"type": "message_delta", "delta": {}, "usage": {"output_tokens": 1e400}}',
    "error-text": '{"type": "error", "error": "x"}',
    "error-message-number": '{"type": "error", "error": {"type": "api_error", "message": 5}}',
    "nan": '{"type": "content_block_delta", "delta": {"type": "text_delta", "text": NaN}}',
    "deep": DEEP,
}


@pytest.mark.parametrize("body", OPENAI_CHAT.values(), ids=OPENAI_CHAT.keys())
async def test_openai_chat_refuses(hostile: HostileProvider, http: HttpClient, body: str) -> None:
    hostile.answer(body)
    with pytest.raises(MalformedResponseError) as caught:
        await OpenAIAdapter().chat(http, openai(hostile), CHAT)
    assert caught.value.provider == "openai"


@pytest.mark.parametrize("body", OPENAI_EMBEDDINGS.values(), ids=OPENAI_EMBEDDINGS.keys())
async def test_openai_embeddings_refuse(hostile: HostileProvider, http: HttpClient, body: str) -> None:
    hostile.answer(body)
    with pytest.raises(MalformedResponseError):
        await OpenAIAdapter().embed(http, openai(hostile), EmbeddingRequest(("one",)))


@pytest.mark.parametrize("event", OPENAI_STREAM.values(), ids=OPENAI_STREAM.keys())
async def test_openai_stream_refuses(hostile: HostileProvider, http: HttpClient, event: str) -> None:
    hostile.sse(event, "[DONE]")
    with pytest.raises(MalformedResponseError):
        _ = [chunk async for chunk in OpenAIAdapter().stream_chat(http, openai(hostile), CHAT)]


@pytest.mark.parametrize("body", ANTHROPIC_CHAT.values(), ids=ANTHROPIC_CHAT.keys())
async def test_anthropic_chat_refuses(hostile: HostileProvider, http: HttpClient, body: str) -> None:
    hostile.answer(body)
    with pytest.raises(MalformedResponseError) as caught:
        await AnthropicAdapter().chat(http, anthropic(hostile), CHAT)
    assert caught.value.provider == "anthropic"


@pytest.mark.parametrize("event", ANTHROPIC_STREAM.values(), ids=ANTHROPIC_STREAM.keys())
async def test_anthropic_stream_refuses(hostile: HostileProvider, http: HttpClient, event: str) -> None:
    hostile.sse(event, '{"type": "message_stop"}')
    with pytest.raises(MalformedResponseError):
        _ = [chunk async for chunk in AnthropicAdapter().stream_chat(http, anthropic(hostile), CHAT)]


async def test_a_well_formed_answer_still_passes(hostile: HostileProvider, http: HttpClient) -> None:
    hostile.answer(oa_chat('{"content": "fine", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}',
                           top=', "usage": {"prompt_tokens": 3, "completion_tokens": 1}'))
    response = await OpenAIAdapter().chat(http, openai(hostile), CHAT)
    assert (response.text, response.tool_calls[0].arguments, response.usage.input_tokens) == ("fine", "{}", 3)


async def test_embedding_rows_come_back_in_input_order(hostile: HostileProvider, http: HttpClient) -> None:
    hostile.answer('{"data": [{"index": 1, "embedding": [2]}, {"index": 0, "embedding": [1.5]}]}')
    response = await OpenAIAdapter().embed(http, openai(hostile), EmbeddingRequest(("a", "b")))
    assert response.vectors == ((1.5,), (2.0,))


HOSTILE_ATOMS = (st.sampled_from(["NaN", "-Infinity", "1e400", HUGE_INT, '"\\ud800"', "{", "]", ""])
                 | st.text(max_size=20))


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 100_000), st.sampled_from("[{"), HOSTILE_ATOMS)
def test_decode_json_raises_nothing_but_value_error(depth: int, opener: str, atom: str) -> None:
    nested = (opener if opener == "[" else '{"a":') * depth + atom + ("]" if opener == "[" else "}") * depth
    with contextlib.suppress(ValueError):
        decode_json(nested)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)))
def test_decode_json_reads_every_strict_json_value(value: object) -> None:
    assert decode_json(json.dumps(value)) == value


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a": -Infinity}', DEEP])
def test_decode_json_refuses_what_strict_json_does_not_allow(text: str) -> None:
    with pytest.raises(ValueError, match="not JSON|nested too deeply"):
        decode_json(text)


ERROR_BODIES = {
    "100,000 deep": "[" * 100_000 + "]" * 100_000,
    "code is an object": '{"error": {"code": {"a": 1}, "message": "x"}}',
    "type is a list": '{"error": {"type": ["x"], "message": "x"}}',
    "error is a list": '{"error": [1]}',
}


@pytest.mark.parametrize("status", [401, 429, 500])
@pytest.mark.parametrize("body", list(ERROR_BODIES.values()), ids=list(ERROR_BODIES))
@pytest.mark.parametrize("adapter", ["openai", "anthropic"])
async def test_a_hostile_error_body_is_still_a_typed_provider_error(
        hostile: HostileProvider, http: HttpClient, adapter: str, body: str, status: int) -> None:
    hostile.answer(body, status=status)
    config, chat = (openai(hostile), OpenAIAdapter().chat) if adapter == "openai" \
        else (anthropic(hostile), AnthropicAdapter().chat)
    with pytest.raises(ProviderError) as caught:
        await chat(http, config, ChatRequest([Message.user("hi")]))
    assert caught.value.status == status
