"""The official openai SDK's Azure client as a second client of the fake's Azure media routes: it
goes to the routes the adapter goes to (the fake counts both on one route and deployment), and
both read the same answers."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import pytest
from openai import AsyncAzureOpenAI
from provmw_azure import DEFAULT_API_VERSION, AzureOpenAIAdapter

from azure_tests.azure_helpers import DEPLOYMENT, azure_config
from provmw.http import HttpClient
from provmw.operations.audio import SpeechRequest, TranscriptionRequest
from provmw.operations.images import ImageEditRequest, ImageRequest
from provmw.testing import FakeProvider, wav
from provmw.testing.wire_media import PNG_1X1

ADAPTER = AzureOpenAIAdapter()




@pytest.fixture
async def sdk(fake: FakeProvider) -> AsyncIterator[AsyncAzureOpenAI]:
    client = AsyncAzureOpenAI(azure_endpoint=fake.url, api_version=DEFAULT_API_VERSION, api_key="azure-test-key",
                              max_retries=0)
    yield client
    await client.close()


async def test_generated_images_read_the_same(fake: FakeProvider, http: HttpClient, sdk: AsyncAzureOpenAI) -> None:
    theirs = await sdk.images.generate(model=DEPLOYMENT, prompt="a cat", response_format="b64_json")
    ours = await ADAPTER.generate_image(http, azure_config(fake), ImageRequest("a cat"))
    assert theirs.data is not None
    assert [base64.b64decode(i.b64_json or "") for i in theirs.data] == [i.data for i in ours.images]
    assert fake.count(route="azure_images", model=DEPLOYMENT) == 2
    assert [r.headers["api-key"] for r in fake.received] == ["azure-test-key"] * 2


async def test_edited_images_read_the_same(fake: FakeProvider, http: HttpClient, sdk: AsyncAzureOpenAI) -> None:
    theirs = await sdk.images.edit(model=DEPLOYMENT, prompt="add a hat", image=("image.png", PNG_1X1, "image/png"))
    ours = await ADAPTER.edit_image(http, azure_config(fake), ImageEditRequest("add a hat", image=PNG_1X1))
    assert theirs.data is not None
    assert [base64.b64decode(i.b64_json or "") for i in theirs.data] == [i.data for i in ours.images]
    assert fake.count(route="azure_image_edits", model=DEPLOYMENT) == 2


async def test_a_transcript_reads_the_same(fake: FakeProvider, http: HttpClient, sdk: AsyncAzureOpenAI) -> None:
    audio = wav(1.5)
    theirs = await sdk.audio.transcriptions.create(model=DEPLOYMENT, file=("audio.wav", audio, "audio/wav"))
    ours = await ADAPTER.transcribe(http, azure_config(fake), TranscriptionRequest(audio))
    assert theirs.text == ours.text
    assert fake.count(route="azure_transcriptions", model=DEPLOYMENT) == 2


async def test_speech_is_the_same_bytes(fake: FakeProvider, http: HttpClient, sdk: AsyncAzureOpenAI) -> None:
    theirs = await sdk.audio.speech.create(model=DEPLOYMENT, input="hello there", voice="alloy", response_format="wav")
    ours = await ADAPTER.speak(http, azure_config(fake), SpeechRequest("hello there", audio_format="wav"))
    assert theirs.content == ours.audio
    assert fake.count(route="azure_speech", model=DEPLOYMENT) == 2
