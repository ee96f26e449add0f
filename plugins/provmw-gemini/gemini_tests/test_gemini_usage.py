"""usageMetadata counted as ADR 0015 says, thought parts kept out of the answer, and embeddings."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from provmw_gemini import GeminiAdapter
from provmw_gemini.answer import read_answer

from provmw.config import ProviderConfig
from provmw.errors import MalformedResponseError
from provmw.http import HttpClient
from provmw.messages import Message
from provmw.requests import ChatRequest, EmbeddingRequest
from provmw.responses import Usage
from provmw.testing import FakeProvider, Fault

ADAPTER = GeminiAdapter()
HELLO = ChatRequest((Message.user("hello world"),))
THINKING = {"promptTokenCount": 10, "cachedContentTokenCount": 4, "toolUsePromptTokenCount": 2,
            "candidatesTokenCount": 5, "thoughtsTokenCount": 7, "totalTokenCount": 24}
COUNTED = Usage(input_tokens=12, cached_input_tokens=4, output_tokens=12, reasoning_tokens=7)


async def test_thoughts_count_as_output_and_cached_content_as_part_of_the_input(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    gemini_fake.script(Fault(usage=THINKING))
    response = await ADAPTER.chat(client, gemini, HELLO)
    assert response.usage == COUNTED


async def test_a_stream_s_last_chunk_carries_the_thinking_usage(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    gemini_fake.script(Fault(usage=THINKING))
    chunks = [c async for c in ADAPTER.stream_chat(client, gemini, HELLO)]
    assert (chunks[-1].finish_reason, chunks[-1].usage) == ("stop", COUNTED)


async def test_more_cached_tokens_than_prompt_tokens_is_malformed(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    gemini_fake.script(Fault(usage={"promptTokenCount": 3, "cachedContentTokenCount": 9}))
    with pytest.raises(MalformedResponseError, match="exceed the input tokens"):
        await ADAPTER.chat(client, gemini, HELLO)


async def test_a_negative_count_is_malformed(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    gemini_fake.script(Fault(usage={"promptTokenCount": 3, "thoughtsTokenCount": -50}))
    with pytest.raises(MalformedResponseError, match="thoughtsTokenCount"):
        await ADAPTER.chat(client, gemini, HELLO)


def test_thought_summaries_are_not_part_of_the_answer() -> None:
    parts = [{"text": "Let me think...", "thought": True}, {"text": "42"}]
    answer = read_answer({"candidates": [{"content": {"parts": parts}, "finishReason": "STOP"}]}, "m")
    assert answer.text == "42"


async def test_one_input_is_embedded_by_embed_content_and_several_by_one_batch(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    await ADAPTER.embed(client, gemini, EmbeddingRequest(("a",)))
    batch = await ADAPTER.embed(client, gemini, EmbeddingRequest(("a", "b", "c"), dimensions=4))
    assert (gemini_fake.count(route="gemini_embed"), gemini_fake.count(route="gemini_batch_embed")) == (1, 1)
    assert [len(v) for v in batch.vectors] == [4, 4, 4]
    assert gemini_fake.received[-1].body["requests"][0]["model"] == "models/gemini-2.5-flash"


@pytest.mark.parametrize("answer", [{"embeddings": [{"values": [0.5]}]},
                                    {"embeddings": [{"values": [0.5]}, {"values": []}]},
                                    {"embeddings": [{"values": [0.5]}, {"values": ["0.5"]}]}])
async def test_a_batch_answer_without_one_good_vector_per_input_is_malformed(
        client: HttpClient, answer: dict[str, Any]) -> None:
    async def batch(request: web.Request) -> web.Response:
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post("/v1beta/models/{model}:batchEmbedContents", batch)
    async with TestServer(app, host="127.0.0.1") as server:
        config = ProviderConfig(identifier="g", provider="gemini", model="m", base_url=str(server.make_url("/v1beta")))
        with pytest.raises(MalformedResponseError, match=r"response\.embeddings"):
            await ADAPTER.embed(client, config, EmbeddingRequest(("a", "b")))
