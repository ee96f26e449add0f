"""The OpenAI adapter's media operations against the fake provider: images made and edited,
transcription and speech, their units and cost, the error table, and every malformed answer refused."""

from __future__ import annotations

import base64
import io
import json
import wave
from typing import Any

import pytest

from provmw.config import ProviderConfig
from provmw.errors import (
    AuthenticationError,
    ConfigurationError,
    InvalidRequestError,
    MalformedResponseError,
    ProviderError,
    ProviderUnavailableError,
    RateLimitError,
    ResponseTooLargeError,
)
from provmw.http import HttpClient, ReadLimits
from provmw.operations.audio import UNBOUNDED_AUDIO, SpeechRequest, TranscriptionRequest
from provmw.operations.images import ImageEditRequest, ImageRequest
from provmw.pricing import PriceTable
from provmw.providers import capabilities_of
from provmw.providers.openai import OpenAIAdapter
from provmw.responses import ProviderResponse
from provmw.testing import FakeProvider, Fault, wav
from provmw.testing.wire_media import PNG_1X1
from tests.conftest import openai_config
from tests.hostile import HostileProvider

ADAPTER = OpenAIAdapter()
PNG = b"\x89PNG\r\n\x1a\nsource"




def cost(config: ProviderConfig, response: ProviderResponse) -> float | None:
    price = PriceTable().price_for(config)
    return None if price is None or not price.covers(response.usage.units) else price.cost_usd(response.usage)


async def test_dall_e_3_images_come_back_as_bytes_with_the_revised_prompt(fake: FakeProvider, http: HttpClient) -> None:
    config = openai_config(fake, model="dall-e-3")
    response = await ADAPTER.generate_image(http, config, ImageRequest("a cat", quality="hd", n=2))
    assert [image.data for image in response.images] == [PNG_1X1, PNG_1X1]
    assert response.images[0].revised_prompt == "a picture of a cat"
    assert response.usage.units == {"image:1024x1024:hd": 2.0} and cost(config, response) == pytest.approx(0.16)


async def test_the_body_asks_for_the_size_billed_and_a_quality_only_when_given(fake: FakeProvider,
                                                                               http: HttpClient) -> None:
    await ADAPTER.generate_image(http, openai_config(fake, model="dall-e-3"), ImageRequest("a cat"))
    body = fake.received[-1].body
    assert body == {"model": "dall-e-3", "prompt": "a cat", "n": 1, "size": "1024x1024"}


async def test_urls_are_returned_when_asked_for(fake: FakeProvider, http: HttpClient) -> None:
    request = ImageRequest("a cat", options={"response_format": "url"})
    response = await ADAPTER.generate_image(http, openai_config(fake, model="dall-e-2"), request)
    assert response.images[0].url == "https://images.fake-provider.invalid/0.png"
    assert fake.received[-1].body["response_format"] == "url"


async def test_gpt_image_1_is_billed_per_image_at_the_quality_it_made_and_keeps_its_tokens(
        fake: FakeProvider, http: HttpClient) -> None:
    config = openai_config(fake, model="gpt-image-1")
    response = await ADAPTER.generate_image(http, config, ImageRequest("a red cat", quality="low", n=2))
    assert response.usage.units == {"image:1024x1024:low": 2.0}
    assert (response.usage.input_tokens, response.usage.output_tokens) == (3, 544)
    assert cost(config, response) == pytest.approx(0.022 + 3 * 10.0 / 1e6)  # input at $10/M; the units carry the output


@pytest.mark.parametrize(("stated", "named"), [({"size": "1536x1024"}, "size"), ({"quality": "high"}, "quality")])
async def test_an_image_answer_stating_another_size_or_quality_than_asked_is_refused(
        hostile: HostileProvider, http: HttpClient, stated: dict[str, str], named: str) -> None:
    hostile.answer(image_answer(**{"size": "1024x1024", "quality": "low", **stated}))
    config = ProviderConfig(identifier="h", provider="openai", model="gpt-image-1", base_url=hostile.openai_base_url)
    with pytest.raises(MalformedResponseError, match=f"{named}: '.*' made"):
        await ADAPTER.generate_image(http, config, ImageRequest("a cat", size="1024x1024", quality="low"))


@pytest.mark.parametrize("request_", [ImageRequest("a cat"), ImageRequest("a cat", size="auto", quality="auto")])
async def test_what_the_provider_chooses_is_billed_as_its_answer_states(
        hostile: HostileProvider, http: HttpClient, request_: ImageRequest) -> None:
    hostile.answer(image_answer(size="1024x1024" if request_.size is None else "1536x1024", quality="medium"))
    config = ProviderConfig(identifier="h", provider="openai", model="gpt-image-1", base_url=hostile.openai_base_url)
    response = await ADAPTER.generate_image(http, config, request_)
    assert response.usage.units == {f"image:{'1024x1024' if request_.size is None else '1536x1024'}:medium": 1.0}


async def test_an_edit_uploads_the_image_and_mask_as_files_of_a_form(fake: FakeProvider, http: HttpClient) -> None:
    config = openai_config(fake, model="dall-e-2")
    request = ImageEditRequest("add a hat", image=PNG, mask=b"\x89PNGmask", size="512x512")
    response = await ADAPTER.edit_image(http, config, request)
    body = fake.received[-1].body
    assert (body["image"], body["mask"], body["prompt"], body["n"], body["size"]) == (
        PNG, b"\x89PNGmask", "add a hat", "1", "512x512")
    assert response.images[0].data == PNG_1X1 and cost(config, response) == pytest.approx(0.018)


async def test_a_transcription_is_billed_the_seconds_the_usage_states(fake: FakeProvider, http: HttpClient) -> None:
    config = openai_config(fake, model="whisper-1")
    response = await ADAPTER.transcribe(http, config, TranscriptionRequest(wav(2.5), language="en"))
    assert response.text == f"fake transcript of {len(wav(2.5))} bytes" and response.language == "en"
    assert response.usage.units == {"audio_second": 3.0} and cost(config, response) == pytest.approx(0.0003)
    body = fake.received[-1].body
    assert (body["response_format"], body["language"], body["file"]) == ("json", "en", wav(2.5))


async def test_verbose_json_gives_the_language_and_the_duration_heard(fake: FakeProvider, http: HttpClient) -> None:
    request = TranscriptionRequest(wav(2.5), options={"response_format": "verbose_json"})
    response = await ADAPTER.transcribe(http, openai_config(fake, model="whisper-1"), request)
    assert (response.language, response.duration_s, response.usage.units) == ("english", 2.5, {"audio_second": 3.0})


async def test_a_model_reporting_tokens_only_is_billed_the_bound_and_keeps_its_tokens(fake: FakeProvider,
                                                                                       http: HttpClient) -> None:
    config = openai_config(fake, model="gpt-4o-mini-transcribe")
    mp3 = b"\xff\xfb\x90\x00" + bytes(7_956)  # an MP3 frame's header: at most 7,960 / 995 = 8 seconds
    response = await ADAPTER.transcribe(http, config, TranscriptionRequest(mp3, filename="a.mp3"))
    assert response.usage.units == {"audio_second": 8.0} and response.duration_s is None
    assert response.usage.input_tokens > 0 and cost(config, response) == pytest.approx(0.0004)


async def test_audio_of_no_bound_is_billed_what_the_answer_states_up_to_a_day(hostile: HostileProvider,
                                                                              http: HttpClient) -> None:
    config = ProviderConfig(identifier="h", provider="openai", model="whisper-1", base_url=hostile.openai_base_url)
    hostile.answer(json.dumps({"text": "hi", "usage": {"type": "duration", "seconds": 3_600}}))
    response = await ADAPTER.transcribe(http, config, TranscriptionRequest(b"OggS" + bytes(99), filename="a.ogg"))
    assert response.usage.units == {"audio_second": 3_600.0}
    hostile.answer(json.dumps({"text": "hi", "usage": {"type": "duration", "seconds": 86_401}}))
    with pytest.raises(MalformedResponseError, match="86401 seconds"):
        await ADAPTER.transcribe(http, config, TranscriptionRequest(b"OggS" + bytes(99), filename="a.ogg"))


async def test_audio_of_no_bound_whose_answer_states_no_seconds_is_billed_an_unknown_cost(
        hostile: HostileProvider, http: HttpClient) -> None:
    hostile.answer(json.dumps({"text": "hi"}))
    config = ProviderConfig(identifier="h", provider="openai", model="whisper-1", base_url=hostile.openai_base_url)
    response = await ADAPTER.transcribe(http, config, TranscriptionRequest(b"OggS" + bytes(99), filename="a.ogg"))
    assert response.usage.units == {UNBOUNDED_AUDIO: 1.0}


async def test_a_transcript_format_that_is_not_json_is_refused_before_sending(fake: FakeProvider,
                                                                               http: HttpClient) -> None:
    request = TranscriptionRequest(b"x", options={"response_format": "srt"})
    with pytest.raises(ConfigurationError, match="response_format"):
        await ADAPTER.transcribe(http, openai_config(fake, model="whisper-1"), request)
    assert fake.count() == 0


async def test_speech_is_the_audio_bytes_billed_by_the_character(fake: FakeProvider, http: HttpClient) -> None:
    config = openai_config(fake, model="tts-1")
    response = await ADAPTER.speak(http, config, SpeechRequest("hello there", voice="nova", audio_format="wav"))
    with wave.open(io.BytesIO(response.audio)) as heard:
        assert heard.getnframes() == 240 * 11
    assert response.media_type == "audio/wav" and response.usage.units == {"character": 11.0}
    assert cost(config, response) == pytest.approx(11 * 0.000015)
    assert fake.received[-1].body == {"model": "tts-1", "input": "hello there", "voice": "nova",
                                      "response_format": "wav"}


async def test_generation_options_are_not_sent_and_extra_body_fields_are(fake: FakeProvider,
                                                                          http: HttpClient) -> None:
    config = openai_config(fake, model="tts-1", options={"max_tokens": 50, "top_p": 0.5,
                                                         "extra_body": {"speed": 1.5}})
    await ADAPTER.speak(http, config, SpeechRequest("hi"))
    assert fake.received[-1].body == {"model": "tts-1", "input": "hi", "voice": "alloy", "response_format": "mp3",
                                      "speed": 1.5}


async def test_a_transcription_sends_its_temperature(fake: FakeProvider, http: HttpClient) -> None:
    config = openai_config(fake, model="whisper-1", options={"max_tokens": 50})
    await ADAPTER.transcribe(http, config, TranscriptionRequest(wav(1.0), options={"temperature": 0.3}))
    body = fake.received[-1].body
    assert (body["temperature"], "max_tokens" in body) == ("0.3", False)


def test_the_adapter_offers_the_four_media_operations() -> None:
    offered = capabilities_of(ADAPTER)
    assert offered.images and offered.image_edits and offered.transcription and offered.speech


CALLS: dict[str, tuple[str, Any]] = {
    "images": ("generate_image", ImageRequest("a cat")),
    "image_edits": ("edit_image", ImageEditRequest("a cat", image=PNG)),
    "transcriptions": ("transcribe", TranscriptionRequest(wav(1.0))),
    "speech": ("speak", SpeechRequest("hi")),
}


@pytest.mark.parametrize("route", list(CALLS))
@pytest.mark.parametrize(("status", "error"), [(400, InvalidRequestError), (401, AuthenticationError),
                                               (429, RateLimitError), (500, ProviderUnavailableError)])
async def test_error_statuses_map_to_the_error_tree_with_openais_message(
        fake: FakeProvider, http: HttpClient, route: str, status: int, error: type[ProviderError]) -> None:
    fake.script(Fault(status=status, message="that will not do"), route=route)
    method, request = CALLS[route]
    with pytest.raises(error, match="that will not do") as raised:
        await getattr(ADAPTER, method)(http, openai_config(fake), request)
    assert raised.value.status == status and fake.count(route=route) == 1


@pytest.mark.parametrize("route", list(CALLS))
async def test_a_body_cut_short_or_broken_is_an_error_never_an_answer(fake: FakeProvider, http: HttpClient,
                                                                      route: str) -> None:
    fake.script(Fault(malformed_json=True), Fault(drop_connection=True), route=route)
    method, request = CALLS[route]
    for _ in range(2):
        with pytest.raises(ProviderError):
            await getattr(ADAPTER, method)(http, openai_config(fake), request)
    assert fake.count(route=route) == 2


def image_answer(**fields: Any) -> str:
    row = {"b64_json": base64.b64encode(b"png").decode()}
    return json.dumps({"created": 1, "data": [row], **fields})


@pytest.mark.parametrize(("answer", "named"), [
    (json.dumps({"created": 1, "data": "x"}), "data"),
    (json.dumps({"created": 1, "data": [{"b64_json": "**not base64**"}]}), "base64"),
    (json.dumps({"created": 1, "data": [{"b64_json": 3}]}), "b64_json"),
    (json.dumps({"created": 1, "data": [{}]}), "exactly one"),
    (json.dumps({"created": 1, "data": [{"url": "u"}, {"url": "v"}]}), "2 images, 1 asked"),
    (image_answer(size="huge"), "size"),
    (image_answer(quality="very-high"), "quality"),
    (image_answer(usage={"input_tokens": -1, "output_tokens": 5}), "input_tokens"),
    (image_answer(usage={"input_tokens": 1, "output_tokens": 2**41}), "output_tokens"),
])
async def test_a_malformed_image_answer_is_refused(hostile: HostileProvider, http: HttpClient, answer: str,
                                                   named: str) -> None:
    hostile.answer(answer)
    config = ProviderConfig(identifier="h", provider="openai", model="gpt-image-1", base_url=hostile.openai_base_url)
    with pytest.raises(MalformedResponseError, match=named):
        await ADAPTER.generate_image(http, config, ImageRequest("a cat", quality="low"))


@pytest.mark.parametrize(("answer", "named"), [
    ({"usage": {"type": "duration", "seconds": 1}}, "text"),
    ({"text": 3}, "text"),
    ({"text": "hi", "usage": {"type": "duration", "seconds": 5}}, "5 seconds of audio reported"),
    ({"text": "hi", "usage": {"type": "duration", "seconds": 3}}, "at most 2 possible"),  # more than reserved
    ({"text": "hi", "usage": {"type": "duration", "seconds": -1}}, "seconds"),
    ({"text": "hi", "usage": {"type": "duration", "seconds": "2"}}, "seconds"),
    ({"text": "hi", "duration": 1e9}, "duration"),
    ({"text": "hi", "usage": {"type": "tokens", "input_tokens": -3, "output_tokens": 1}}, "input_tokens"),
])
async def test_a_malformed_transcription_is_refused(hostile: HostileProvider, http: HttpClient,
                                                    answer: dict[str, Any], named: str) -> None:
    hostile.answer(json.dumps(answer))
    config = ProviderConfig(identifier="h", provider="openai", model="whisper-1", base_url=hostile.openai_base_url)
    with pytest.raises(MalformedResponseError, match=named):
        await ADAPTER.transcribe(http, config, TranscriptionRequest(wav(2.0)))  # at most 2 seconds


@pytest.mark.parametrize(("body", "content_type"), [(b'{"error": null}', "application/json"), (b"", "audio/mpeg"),
                                                    (b"<html>", "text/html")])
async def test_speech_that_is_not_audio_is_refused(hostile: HostileProvider, http: HttpClient, body: bytes,
                                                   content_type: str) -> None:
    hostile.answer(body, content_type=content_type)
    config = ProviderConfig(identifier="h", provider="openai", model="tts-1", base_url=hostile.openai_base_url)
    with pytest.raises(MalformedResponseError, match="not audio"):
        await ADAPTER.speak(http, config, SpeechRequest("hi"))


async def test_speech_longer_than_the_body_limit_is_refused(fake: FakeProvider) -> None:
    http = HttpClient(limits=ReadLimits(max_body_bytes=1_000))
    try:
        with pytest.raises(ResponseTooLargeError):
            await ADAPTER.speak(http, openai_config(fake, model="tts-1"), SpeechRequest("x" * 100, audio_format="wav"))
    finally:
        await http.aclose()


async def test_an_upload_goes_with_the_bearer_key_and_a_multipart_content_type(fake: FakeProvider,
                                                                               http: HttpClient) -> None:
    await ADAPTER.transcribe(http, openai_config(fake, model="whisper-1"), TranscriptionRequest(wav(1.0)))
    headers = fake.received[-1].headers
    assert headers["Content-Type"].startswith("multipart/form-data; boundary=")
    assert headers["Authorization"].startswith("Bearer sk-SENTINEL")


async def test_a_faults_usage_replaces_the_images_and_is_bounded(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(usage={"input_tokens": 7, "output_tokens": -2}), route="images")
    with pytest.raises(MalformedResponseError, match="output_tokens"):
        await ADAPTER.generate_image(http, openai_config(fake, model="gpt-image-1"), ImageRequest("a", quality="low"))


@pytest.mark.parametrize("route", list(CALLS))
async def test_a_limited_route_tells_each_answer_the_requests_left(fake: FakeProvider, http: HttpClient,
                                                                   route: str) -> None:
    fake.limit(10, route=route)
    method, request = CALLS[route]
    response = await getattr(ADAPTER, method)(http, openai_config(fake), request)
    assert response.rate_limit is not None and response.rate_limit.remaining_requests == 9
