"""The official openai SDK as a second client of the fake provider's media routes: it and provmw's
adapter read the same images, the same transcript and usage, and the same audio bytes."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import pytest
from openai import AsyncOpenAI

from provmw.http import HttpClient
from provmw.operations.audio import SpeechRequest, TranscriptionRequest
from provmw.operations.images import ImageEditRequest, ImageRequest
from provmw.providers.openai import OpenAIAdapter
from provmw.testing import FakeProvider, wav
from tests.conftest import openai_config

ADAPTER = OpenAIAdapter()




@pytest.fixture
async def sdk(fake: FakeProvider) -> AsyncIterator[AsyncOpenAI]:
    client = AsyncOpenAI(base_url=fake.openai_base_url, api_key="sk-test", max_retries=0)
    yield client
    await client.close()


async def test_generated_images_read_the_same(fake: FakeProvider, http: HttpClient, sdk: AsyncOpenAI) -> None:
    theirs = await sdk.images.generate(model="dall-e-3", prompt="a cat", n=1, size="1024x1024", quality="hd",
                                       response_format="b64_json")
    ours = await ADAPTER.generate_image(http, openai_config(fake, model="dall-e-3"),
                                        ImageRequest("a cat", quality="hd", options={"response_format": "b64_json"}))
    assert theirs.data is not None
    assert [base64.b64decode(i.b64_json or "") for i in theirs.data] == [i.data for i in ours.images]
    assert [i.revised_prompt for i in theirs.data] == [i.revised_prompt for i in ours.images]


async def test_gpt_image_1_sizes_qualities_and_tokens_read_the_same(fake: FakeProvider, http: HttpClient,
                                                                    sdk: AsyncOpenAI) -> None:
    theirs = await sdk.images.generate(model="gpt-image-1", prompt="a red cat", n=2, quality="medium")
    ours = await ADAPTER.generate_image(http, openai_config(fake, model="gpt-image-1"),
                                        ImageRequest("a red cat", quality="medium", n=2))
    assert theirs.usage is not None
    assert ours.usage.units == {f"image:{theirs.size}:{theirs.quality}": len(theirs.data or [])}
    assert (ours.usage.input_tokens, ours.usage.output_tokens) == (theirs.usage.input_tokens,
                                                                   theirs.usage.output_tokens)


async def test_edited_images_read_the_same(fake: FakeProvider, http: HttpClient, sdk: AsyncOpenAI) -> None:
    png = b"\x89PNG\r\n\x1a\nsource"
    theirs = await sdk.images.edit(model="dall-e-2", image=("image.png", png, "image/png"), prompt="add a hat",
                                   size="512x512", response_format="b64_json")
    sent_by_sdk = fake.received[-1].body
    ours = await ADAPTER.edit_image(http, openai_config(fake, model="dall-e-2"),
                                    ImageEditRequest("add a hat", image=png, size="512x512",
                                                     options={"response_format": "b64_json"}))
    assert theirs.data is not None
    assert [base64.b64decode(i.b64_json or "") for i in theirs.data] == [i.data for i in ours.images]
    assert fake.received[-1].body["image"] == sent_by_sdk["image"] == png


async def test_transcripts_and_their_seconds_read_the_same(fake: FakeProvider, http: HttpClient,
                                                           sdk: AsyncOpenAI) -> None:
    audio = wav(2.5)
    theirs = await sdk.audio.transcriptions.create(model="whisper-1", file=("audio.wav", audio, "audio/wav"),
                                                   response_format="json")
    ours = await ADAPTER.transcribe(http, openai_config(fake, model="whisper-1"), TranscriptionRequest(audio))
    assert ours.text == theirs.text
    assert theirs.usage is not None and theirs.usage.type == "duration"
    assert ours.usage.units == {"audio_second": theirs.usage.seconds}


async def test_spoken_audio_reads_the_same_bytes(fake: FakeProvider, http: HttpClient, sdk: AsyncOpenAI) -> None:
    theirs = await sdk.audio.speech.create(model="tts-1", voice="alloy", input="hello there", response_format="mp3")
    ours = await ADAPTER.speak(http, openai_config(fake, model="tts-1"), SpeechRequest("hello there"))
    assert ours.audio == theirs.content and ours.audio.startswith(b"\xff\xfb")
    assert ours.media_type == theirs.response.headers["content-type"] == "audio/mpeg"
