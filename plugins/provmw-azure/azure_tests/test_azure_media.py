"""Images, transcription and speech on Azure's deployment routes, against the fake over loopback HTTP;
moderation, which Azure OpenAI does not serve, refused before any request."""

from __future__ import annotations

import base64
import io
import wave
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import provmw_azure
import pytest
from provmw_azure import DEFAULT_API_VERSION, AzureOpenAIAdapter

from azure_tests.azure_helpers import DEPLOYMENT, azure_config
from provmw.config import ProviderConfig
from provmw.errors import (
    ContentPolicyError,
    InvalidRequestError,
    MalformedResponseError,
    RateLimitError,
    UnsupportedOperationError,
)
from provmw.http import Body, FormFile, HttpClient, Url
from provmw.manager import ServiceManager
from provmw.operations.audio import SpeechRequest, TranscriptionRequest
from provmw.operations.images import ImageEditRequest, ImageRequest
from provmw.operations.moderation import ModerationRequest
from provmw.plugins import PluginHost
from provmw.responses import ProviderResponse
from provmw.settings import PluginPolicy, Settings
from provmw.stores.usage import SqliteUsageStore
from provmw.testing import FakeProvider, Fault, wav
from provmw.testing.wire_media import PNG_1X1

ADAPTER = AzureOpenAIAdapter()
Call = Callable[[HttpClient, ProviderConfig], Awaitable[ProviderResponse]]




# Each operation: the fake's route, the path after the deployment, and the call.
OPERATIONS: dict[str, tuple[str, str, Call]] = {
    "image": ("azure_images", "images/generations",
              lambda http, config: ADAPTER.generate_image(http, config, ImageRequest("a cat"))),
    "image_edit": ("azure_image_edits", "images/edits",
                   lambda http, config: ADAPTER.edit_image(http, config, ImageEditRequest("add a hat", image=PNG_1X1))),
    "transcription": ("azure_transcriptions", "audio/transcriptions",
                      lambda http, config: ADAPTER.transcribe(http, config, TranscriptionRequest(wav(2.0)))),
    "speech": ("azure_speech", "audio/speech",
               lambda http, config: ADAPTER.speak(http, config, SpeechRequest("hello", audio_format="wav"))),
}


class SeenUrls(HttpClient):
    """The manager's client, recording each URL it is handed (query included) before it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    async def post_json_with_headers(self, url: Url, body: Body,
                                     headers: Mapping[str, str]) -> tuple[Any, Mapping[str, str]]:
        self.urls.append(str(url))
        return await super().post_json_with_headers(url, body, headers)

    async def post_form(self, url: Url, fields: Mapping[str, str], files: Mapping[str, FormFile],
                        headers: Mapping[str, str]) -> tuple[Any, Mapping[str, str]]:
        self.urls.append(str(url))
        return await super().post_form(url, fields, files, headers)

    async def post_bytes(self, url: Url, body: Body,
                         headers: Mapping[str, str]) -> tuple[bytes, str, Mapping[str, str]]:
        self.urls.append(str(url))
        return await super().post_bytes(url, body, headers)


@pytest.fixture
async def seen() -> AsyncIterator[SeenUrls]:
    client = SeenUrls()
    yield client
    await client.aclose()


@pytest.mark.parametrize("operation", OPERATIONS)
async def test_each_goes_to_the_deployment_with_the_api_version(operation: str, fake: FakeProvider,
                                                                seen: SeenUrls) -> None:
    route, path, call = OPERATIONS[operation]
    await call(seen, azure_config(fake))
    assert seen.urls == [f"{fake.url}/openai/deployments/{DEPLOYMENT}/{path}?api-version={DEFAULT_API_VERSION}"]
    assert fake.count(route=route, model=DEPLOYMENT) == 1


@pytest.mark.parametrize("operation", OPERATIONS)
async def test_each_sends_the_key_as_api_key_and_no_bearer(operation: str, fake: FakeProvider,
                                                           http: HttpClient) -> None:
    _, _, call = OPERATIONS[operation]
    response = await call(http, azure_config(fake, api_key="k-123456"))
    headers = fake.received[-1].headers
    assert headers["api-key"] == "k-123456" and "Authorization" not in headers
    assert (response.provider, response.served_by) == ("azure", "azure-main")


@pytest.mark.parametrize("operation", OPERATIONS)
async def test_a_missing_deployment_is_named_in_the_error(operation: str, fake: FakeProvider,
                                                          http: HttpClient) -> None:
    route, _, call = OPERATIONS[operation]
    fake.script(Fault(status=404, code="DeploymentNotFound", message="The API deployment does not exist"),
                route=route)
    with pytest.raises(InvalidRequestError, match=f"is '{DEPLOYMENT}' a deployment of 127.0.0.1") as caught:
        await call(http, azure_config(fake))
    assert caught.value.provider == "azure"


@pytest.mark.parametrize("operation", OPERATIONS)
async def test_a_numeric_rate_limit_code_is_a_rate_limit_error(operation: str, fake: FakeProvider,
                                                               http: HttpClient) -> None:
    route, _, call = OPERATIONS[operation]
    fake.script(Fault(status=429, code="429", headers={"retry-after-ms": "1500"}), route=route)
    with pytest.raises(RateLimitError) as caught:
        await call(http, azure_config(fake))
    assert caught.value.retry_after_s == pytest.approx(1.5)


async def test_an_image_is_read_and_billed_by_size_and_quality(fake: FakeProvider, http: HttpClient) -> None:
    config = azure_config(fake, model="dall-e-3", base_url=f"{fake.url}/openai/deployments/{DEPLOYMENT}")
    response = await ADAPTER.generate_image(http, config, ImageRequest("a cat", quality="hd", n=2))
    assert [image.data for image in response.images] == [PNG_1X1, PNG_1X1]
    assert response.images[0].revised_prompt == "a picture of a cat"
    assert response.usage.units == {"image:1024x1024:hd": 2}


async def test_an_edit_uploads_the_image_and_reads_the_answer(fake: FakeProvider, http: HttpClient) -> None:
    request = ImageEditRequest("add a hat", image=PNG_1X1, size="256x256", n=3)
    response = await ADAPTER.edit_image(http, azure_config(fake), request)
    assert fake.received[-1].body["image"] == PNG_1X1
    assert len(response.images) == 3 and response.usage.units == {"image:256x256:standard": 3}


async def test_a_transcript_is_read_and_billed_by_the_second(fake: FakeProvider, http: HttpClient) -> None:
    audio = wav(2.5)
    response = await ADAPTER.transcribe(http, azure_config(fake, model="whisper"), TranscriptionRequest(audio))
    assert response.text == f"fake transcript of {len(audio)} bytes"
    assert response.usage.units == {"audio_second": 3}


async def test_speech_is_the_audio_s_bytes(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.speak(http, azure_config(fake), SpeechRequest("hello", audio_format="wav"))
    with wave.open(io.BytesIO(response.audio)) as heard:
        assert heard.getnframes() == 5 * 240
    assert response.media_type == "audio/wav" and response.usage.units == {"character": 5}


async def test_a_prompt_the_filter_refused_is_a_content_policy_error(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=400, code="content_filter", message="Your request was rejected"), route="azure_images")
    with pytest.raises(ContentPolicyError, match=r"rejected \(filtered: hate \(high\)\)"):
        await ADAPTER.generate_image(http, azure_config(fake), ImageRequest("a cat"))


async def test_a_malformed_image_answer_is_named_azure_s(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(replace={base64.b64encode(PNG_1X1).decode(): 42}), route="azure_images")
    with pytest.raises(MalformedResponseError) as caught:
        await ADAPTER.generate_image(http, azure_config(fake), ImageRequest("a cat"))
    assert caught.value.provider == "azure"


async def test_a_key_azure_echoes_in_an_upload_s_error_is_masked(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=400, message="bad key k-echoed-123456"), route="azure_transcriptions")
    with pytest.raises(InvalidRequestError) as caught:
        await ADAPTER.transcribe(http, azure_config(fake, api_key="k-echoed-123456"), TranscriptionRequest(wav(1.0)))
    assert "k-echoed-123456" not in str(caught.value)


async def test_speech_with_an_entra_token_sends_the_bearer_and_no_api_key(fake: FakeProvider,
                                                                          http: HttpClient) -> None:
    async def token() -> tuple[str, float]:
        return "entra-token-123", 4e9

    adapter = AzureOpenAIAdapter(token_provider=token)
    await adapter.speak(http, azure_config(fake, api_key=None), SpeechRequest("hello"))
    headers = fake.received[-1].headers
    assert headers["Authorization"] == "Bearer entra-token-123" and "api-key" not in headers


async def test_moderation_is_refused_before_any_request(fake: FakeProvider, http: HttpClient) -> None:
    with pytest.raises(UnsupportedOperationError, match="'moderation'") as caught:
        await ADAPTER.moderate(http, azure_config(fake), ModerationRequest(("hello",)))
    assert fake.count() == 0 and "azure-main" in str(caught.value)


def test_the_capabilities_are_openai_s_but_moderation() -> None:
    offered = ADAPTER.capabilities
    assert not offered.moderation
    assert (offered.images, offered.image_edits, offered.transcription, offered.speech) == (True, True, True, True)


@pytest.fixture
def host() -> PluginHost:
    """A host with the azure plugin registered as an application would (no entry-point autoload)."""
    plugins = PluginHost(PluginPolicy(autoload=False), environ={})
    plugins.register(provmw_azure, "azure")
    return plugins


async def test_an_image_call_through_the_manager_is_priced_per_image(fake: FakeProvider, host: PluginHost,
                                                                     tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    # A deployment's name is no model the price table knows: the configuration names its own price.
    config = azure_config(fake, identifier="pictures", model="dall-e-3",
                          base_url=f"{fake.url}/openai/deployments/images-prod",
                          price={"input_usd_per_mtok": 0.0, "units": {"image:1792x1024:hd": 0.12}})
    settings = Settings(configurations={"pictures": config}, middleware={"usage": {"path": str(ledger)}})
    async with ServiceManager(settings, host=host) as manager:
        response = await manager.generate_image("a cat", quality="hd", size="1792x1024", n=2)
    store = SqliteUsageStore(ledger)
    [row] = await store.records()
    await store.aclose()
    assert (row.operation, row.provider, row.config_id, row.status) == ("image", "azure", "pictures", "ok")
    assert row.cost_usd == pytest.approx(0.24) and response.usage.cost_usd == pytest.approx(0.24)
    assert fake.count(route="azure_images", model="images-prod") == 1


async def test_moderation_through_the_manager_sends_nothing(fake: FakeProvider, host: PluginHost) -> None:
    settings = Settings(configurations={"azure-main": azure_config(fake)})
    async with ServiceManager(settings, host=host) as manager:
        with pytest.raises(UnsupportedOperationError, match="moderation"):
            await manager.moderate("hello")
    assert fake.count() == 0
