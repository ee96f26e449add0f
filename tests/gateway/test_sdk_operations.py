"""The OpenAI SDK's calls beyond chat through the gateway: completions, Responses (unary and SSE),
images, speech, transcription (multipart), moderation; rerank (no SDK call) over raw HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import openai
import pytest
from openai.types.responses import FunctionToolParam, ResponseCompletedEvent, ResponseFunctionToolCall

from provmw.testing import FakeProvider
from tests.gateway.test_server import Running, running_gateway


@pytest.fixture
async def gw(fake: FakeProvider, tmp_path: Path) -> AsyncIterator[Running]:
    async with running_gateway(fake, tmp_path) as running:
        yield running


def sdk(gw: Running) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)


async def test_a_completion(gw: Running) -> None:
    answer = await sdk(gw).completions.create(model="chat", prompt="say hi")
    assert answer.choices[0].text == "echo: say hi" and answer.usage and answer.usage.total_tokens > 0


async def test_a_response(gw: Running) -> None:
    answer = await sdk(gw).responses.create(model="chat", input="hello there")
    assert "hello there" in answer.output_text and answer.usage and answer.usage.output_tokens > 0


async def test_a_streamed_response_sends_its_text_then_completes(gw: Running) -> None:
    events = [e async for e in await sdk(gw).responses.create(model="chat", input="hello there", stream=True)]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert "hello there" in deltas and events[-1].type == "response.completed"
    assert events[-1].response.output_text == deltas


async def test_an_image(gw: Running) -> None:
    answer = await sdk(gw).images.generate(model="chat", prompt="a cat", size="1024x1024")
    assert answer.data and (answer.data[0].b64_json or answer.data[0].url)


async def test_speech_is_the_audio_bytes(gw: Running) -> None:
    answer = await sdk(gw).audio.speech.create(model="chat", voice="alloy", input="hello")
    assert len(answer.content) > 0


async def test_a_transcription_from_a_multipart_upload(gw: Running) -> None:
    answer = await sdk(gw).audio.transcriptions.create(model="chat", file=("a.wav", b"RIFF....WAVEfmt "))
    assert isinstance(answer.text, str) and answer.text


async def test_a_moderation(gw: Running) -> None:
    answer = await sdk(gw).moderations.create(model="chat", input=["fine words", "more words"])
    assert len(answer.results) == 2 and isinstance(answer.results[0].flagged, bool)


async def test_a_rerank_in_coheres_shape(gw: Running) -> None:
    body = {"model": "rank", "query": "cats", "documents": ["dogs bark", "cats purr", "birds sing"], "top_n": 2}
    async with aiohttp.ClientSession() as client, client.post(
            f"{gw.url}/v1/rerank", json=body, headers={"authorization": f"Bearer {gw.key}"}) as response:
        answer = await response.json()
    assert response.status == 200 and len(answer["results"]) == 2
    assert answer["results"][0]["relevance_score"] >= answer["results"][1]["relevance_score"]


async def test_a_streamed_response_sends_its_function_calls(gw: Running) -> None:
    tool: FunctionToolParam = {
        "type": "function", "name": "weather", "description": "the weather in a city", "strict": False,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    events = [e async for e in await sdk(gw).responses.create(model="chat", input="weather in Paris?",
                                                               tools=[tool], stream=True)]
    done = events[-1]
    assert isinstance(done, ResponseCompletedEvent)
    calls = [item for item in done.response.output if isinstance(item, ResponseFunctionToolCall)]
    assert calls and calls[0].name == "weather"


async def test_a_streamed_completion_is_refused_400(gw: Running) -> None:
    with pytest.raises(openai.BadRequestError):
        await sdk(gw).completions.create(model="chat", prompt="say hi", stream=True)
