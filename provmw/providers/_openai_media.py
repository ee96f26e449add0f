"""The OpenAI adapter's media operations: images made and edited, transcription, speech.

``/images/generations`` takes JSON, ``/images/edits`` and ``/audio/transcriptions`` a
multipart upload, and ``/audio/speech`` answers with the audio's bytes. Every call is billed
in units (ADR 0053): images by size and quality as the answer states them (gpt-image-1 says
both; dall-e models say neither, and the request's are billed), seconds of audio, characters
spoken. gpt-image-1 and gpt-4o-transcribe also report tokens: they are kept in the usage, and
the bundled prices rate them at 0, so the units alone carry the cost (OpenAI's per-image and
per-minute prices are its own figures for what those tokens cost).

Every number an answer reports is bounded: no more images than asked, at the size and quality
asked (where the call left one to the provider, the stated one is billed: the worst case took the
dearest), no more seconds than the call reserved (:func:`provmw.operations.audio.most_audio_seconds`,
or :data:`~provmw.operations.audio.MOST_REPORTED_SECONDS` for audio of no known bound).
"""

from __future__ import annotations

import json
import mimetypes
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from provmw._base import serde
from provmw.errors import ConfigurationError, InvalidDataError, MalformedResponseError
from provmw.http import FormFile, malformed, plain_json
from provmw.operations.audio import (
    MEDIA_TYPES,
    MOST_REPORTED_SECONDS,
    UNBOUNDED_AUDIO,
    SpeechRequest,
    SpeechResponse,
    TranscriptionRequest,
    TranscriptionResponse,
    most_audio_seconds,
)
from provmw.operations.images import GeneratedImage, ImageEditRequest, ImageRequest, ImageResponse, image_unit
from provmw.providers._usage import UsageBody
from provmw.requests import merged_options
from provmw.responses import RateLimitHint, Usage

if TYPE_CHECKING:
    from provmw.config import ProviderConfig
    from provmw.http import HttpClient
    from provmw.providers.openai import OpenAIAdapter

__all__ = ["edit_image", "generate_image", "speak", "transcribe"]

_SHAPE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError, ConfigurationError)
_REPORTED_SIZE = re.compile(r"[1-9][0-9]{1,4}x[1-9][0-9]{1,4}")
_TRANSCRIPT_FORMATS = ("json", "verbose_json")  # the answers that are JSON
T = TypeVar("T")


async def generate_image(adapter: OpenAIAdapter, http: HttpClient, config: ProviderConfig,
                         request: ImageRequest) -> ImageResponse:
    """POST /images/generations."""
    body, asked = _image_body(config, request)
    data, hint = await adapter._post(http, config, "/images/generations", body)
    return _read(adapter.name, config, lambda: _images(adapter.name, config, data, request.n, asked, hint))


async def edit_image(adapter: OpenAIAdapter, http: HttpClient, config: ProviderConfig,
                     request: ImageEditRequest) -> ImageResponse:
    """POST /images/edits, the image (and mask) uploaded as files of a form."""
    body, asked = _image_body(config, request)
    files = {"image": _image_file("image", request.image.data, request.image.media_type)}
    if request.mask is not None:
        files["mask"] = _image_file("mask", request.mask.data, request.mask.media_type)
    data, hint = await adapter._post_form(http, config, "/images/edits", _form_fields(body), files)
    return _read(adapter.name, config, lambda: _images(adapter.name, config, data, request.n, asked, hint))


async def transcribe(adapter: OpenAIAdapter, http: HttpClient, config: ProviderConfig,
                     request: TranscriptionRequest) -> TranscriptionResponse:
    """POST /audio/transcriptions, the audio uploaded as a file; the answer as JSON."""
    options = merged_options(config, request.options)
    form = options.get("response_format") or "json"
    if form not in _TRANSCRIPT_FORMATS:
        raise ConfigurationError(f"options.response_format must be one of {', '.join(_TRANSCRIPT_FORMATS)} "
                                 f"(a transcription is read as JSON), got {form!r:.40}")
    body = {**_extra(options), "model": config.model, "response_format": form}
    given = (("temperature", options.get("temperature")), ("language", request.language), ("prompt", request.prompt))
    body.update({name: value for name, value in given if value is not None})
    media_type = mimetypes.guess_type(request.filename)[0] or "application/octet-stream"
    files = {"file": (request.filename, request.audio, media_type)}
    data, hint = await adapter._post_form(http, config, "/audio/transcriptions", _form_fields(body), files)
    return _read(adapter.name, config, lambda: _transcription(adapter.name, config, data, request, hint))


async def speak(adapter: OpenAIAdapter, http: HttpClient, config: ProviderConfig,
                request: SpeechRequest) -> SpeechResponse:
    """POST /audio/speech; the answer is the audio's bytes."""
    body = {**_extra(merged_options(config, request.options)), "model": config.model, "input": request.text,
            "voice": request.voice, "response_format": request.audio_format}
    audio, content_type, hint = await adapter._post_bytes(http, config, "/audio/speech", body)
    media_type = content_type.split(";")[0].strip().lower() or MEDIA_TYPES[request.audio_format]
    if not audio or media_type == "application/json" or media_type.startswith("text/"):
        raise MalformedResponseError(f"speech answer is not audio ({len(audio)} bytes of {media_type})",
                                     provider=adapter.name, model=config.model)
    return SpeechResponse(provider=adapter.name, model=config.model, served_by=config.identifier, audio=audio,
                          media_type=media_type, usage=Usage(units={"character": len(request.text)}),
                          rate_limit=hint)


def _read(provider: str, config: ProviderConfig, parse: Callable[[], T]) -> T:
    """``parse()``, with any shape error of the answer made one ``MalformedResponseError``."""
    try:
        return parse()
    except _SHAPE_ERRORS as exc:
        raise malformed(provider, config.model, exc) from None


def _extra(options: Mapping[str, Any]) -> dict[str, Any]:
    """The provider's own fields (``extra_body``): generation options (max_tokens, top_p...) are no
    fields of these endpoints, so only the ones each takes are sent, by name."""
    return dict(plain_json(options.get("extra_body") or {}))


@attrs.frozen
class _Asked:
    """The size and quality an image call asked for, and which of them the provider chooses."""

    size: str
    quality: str
    chooses: tuple[bool, bool]  # the size, the quality (ImageRequest.provider_chooses)


def _image_body(config: ProviderConfig, request: ImageRequest) -> tuple[dict[str, Any], _Asked]:
    """The body, and what it asked: the size is always sent (the bill is what was asked for), the
    quality when given (gpt-image-1 refuses dall-e's ``standard``)."""
    options = merged_options(config, request.options)
    size, quality = request.resolved(options)
    body = {**_extra(options), "model": config.model, "prompt": request.prompt, "n": request.n, "size": size}
    if request.quality is not None:
        body["quality"] = request.quality
    if options.get("response_format") is not None:
        body["response_format"] = options["response_format"]  # url or b64_json, as the call asked
    return body, _Asked(size, quality, request.provider_chooses(options))


def _image_file(name: str, data: bytes | None, media_type: str) -> FormFile:
    assert data is not None  # the request holds bytes (ImageEditRequest checks)
    return f"{name}.{media_type.removeprefix('image/')}", data, media_type


def _form_fields(body: Mapping[str, Any]) -> dict[str, str]:
    """A JSON body as form fields: text as it is, anything else as its JSON."""
    return {name: value if isinstance(value, str) else json.dumps(value) for name, value in body.items()}


def _images(provider: str, config: ProviderConfig, data: Any, n: int, asked: _Asked,
            hint: RateLimitHint | None) -> ImageResponse:
    body = serde.mapping(data, "response")
    rows = serde.get(body, "data", list, "response")
    if len(rows) > n:
        raise InvalidDataError(f"response.data: {len(rows)} images, {n} asked for")
    stated = [serde.get(body, name, str, "response", default=None) for name in ("size", "quality")]
    if not _REPORTED_SIZE.fullmatch(stated[0] or asked.size) or not (stated[1] or asked.quality).isalpha():
        raise InvalidDataError(f"response: size {stated[0]!r:.20} or quality {stated[1]!r:.20} is not one")
    size = _billed("size", asked.size, stated[0], chooses=asked.chooses[0])
    quality = _billed("quality", asked.quality, stated[1], chooses=asked.chooses[1])
    counts = UsageBody.of(body.get("usage"), provider=provider, model=config.model)
    usage = counts.usage(input_tokens=counts.count("input_tokens"), output_tokens=counts.count("output_tokens"))
    return ImageResponse(provider=provider, model=config.model, served_by=config.identifier, rate_limit=hint,
                         images=tuple(_image(row, f"response.data[{i}]") for i, row in enumerate(rows)),
                         usage=attrs.evolve(usage, units={image_unit(size, quality): len(rows)}))


def _billed(name: str, asked: str, stated: str | None, *, chooses: bool) -> str:
    """The size or quality an image is billed at: the one asked; the one stated where the provider
    chooses (the worst case took the dearest). Another than asked would bill what was not reserved."""
    if stated is None or stated == asked:
        return asked
    if chooses:
        return stated
    raise InvalidDataError(f"response.{name}: {stated!r:.20} made, {asked!r:.20} asked for")


def _image(value: Any, where: str) -> GeneratedImage:
    row = serde.mapping(value, where)
    encoded = serde.get(row, "b64_json", str, where, default=None)
    return GeneratedImage.from_dict({"url": serde.get(row, "url", str, where, default=None), "data": encoded,
                                     "revised_prompt": serde.get(row, "revised_prompt", str, where, default=None)},
                                    where)


def _transcription(provider: str, config: ProviderConfig, data: Any, request: TranscriptionRequest,
                   hint: RateLimitHint | None) -> TranscriptionResponse:
    """The text; billed the seconds the usage states, else the duration heard, else the bound."""
    body = serde.mapping(data, "response")
    counts = UsageBody.of(body.get("usage"), provider=provider, model=config.model)
    kind = counts.body.get("type")
    usage = counts.usage(input_tokens=counts.count("input_tokens") if kind == "tokens" else 0,
                         output_tokens=counts.count("output_tokens") if kind == "tokens" else 0)
    most = most_audio_seconds(request.audio)  # what the call reserved: never more is billed
    limit = MOST_REPORTED_SECONDS if most is None else most
    billed = _seconds(counts.body.get("seconds") if kind == "duration" else None, "response.usage.seconds", limit)
    duration = _seconds(body.get("duration"), "response.duration", limit)
    said = next((s for s in (billed, duration) if s is not None), most)
    units = {UNBOUNDED_AUDIO: 1.0} if said is None else {"audio_second": float(said)}  # None: a bill unknown
    return TranscriptionResponse(
        provider=provider, model=config.model, served_by=config.identifier, rate_limit=hint,
        text=serde.get(body, "text", str, "response"),
        language=serde.get(body, "language", str, "response", default=None) or request.language,
        duration_s=duration if duration is not None else billed,
        usage=attrs.evolve(usage, units=units))


def _seconds(value: Any, where: str, most: int) -> float | None:
    """Seconds of audio an answer reports, within what the audio can hold."""
    if value is None:
        return None
    seconds = serde.finite(value, where)
    if not 0 <= seconds <= most:
        raise InvalidDataError(f"{where}: {seconds:g} seconds of audio reported, at most {most} possible")
    return seconds
