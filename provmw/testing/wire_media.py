"""The fake provider's media routes, in the OpenAI wire format: images made and edited,
transcription and speech.

Answers are deterministic: every image is the same 1x1 PNG; a transcript is derived from the
audio's byte length, and its duration read from a WAV header (else the size at 32 kbit/s);
speech is a WAV (or bytes opening as the format asked does) whose length grows with the text.
Uploads arrive parsed (``FakeProvider`` reads a multipart form into a dict of its fields, files
as their bytes); a binary answer is a :class:`FakeBinary`, sent as it is.
"""

from __future__ import annotations

import base64
import io
import math
import wave
from collections.abc import Mapping
from typing import Any

import attrs

from provmw.testing.wires import CREATED, OpenAIWire, Tokenizer, words

__all__ = ["PNG_1X1", "FakeBinary", "OpenAIMediaWire", "heard_seconds", "openai_images", "openai_speech",
           "openai_transcription", "wav"]

# The smallest valid PNG: one transparent pixel.
PNG_1X1 = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAAB"
                           "JRU5ErkJggg==")
# What gpt-image-1 bills as output tokens for one square image at each quality (OpenAI's table).
_IMAGE_TOKENS = {"low": 272, "medium": 1056, "high": 4160}
_SPEECH_TYPES = {"mp3": "audio/mpeg", "opus": "audio/opus", "aac": "audio/aac", "flac": "audio/flac",
                 "wav": "audio/wav", "pcm": "audio/pcm"}
# How each compressed format's bytes open (the fake's audio is silence after that).
_MAGIC = {"mp3": b"\xff\xfb\x90\x64", "opus": b"OggS", "aac": b"\xff\xf1\x50\x80", "flac": b"fLaC"}
_SPEECH_RATE = 24_000  # samples a second, as OpenAI's speech is
_SAMPLES_PER_CHARACTER = 240  # 10 ms of audio a character
_FAKE_BITRATE_BPS = 32_000  # how long the fake hears a file that is not WAV


@attrs.frozen
class FakeBinary:
    """An answer sent as raw bytes of ``content_type``, not as JSON."""

    data: bytes
    content_type: str


def openai_images(body: Mapping[str, Any]) -> dict[str, Any]:
    """An ``ImagesResponse``: ``n`` images as base64 (or URLs when asked); gpt-image models also
    state the size and quality made and the tokens billed, dall-e-3 a revised prompt."""
    model, prompt, n = str(body.get("model", "")), str(body.get("prompt", "")), int(body.get("n") or 1)
    url = body.get("response_format") == "url"
    revised = {"revised_prompt": f"a picture of {prompt}"} if model == "dall-e-3" else {}
    rows = [{"url": f"https://images.fake-provider.invalid/{i}.png"} if url
            else {"b64_json": base64.b64encode(PNG_1X1).decode("ascii")} for i in range(n)]
    answer: dict[str, Any] = {"created": CREATED, "data": [{**row, **revised} for row in rows]}
    if model.startswith("gpt-image"):
        quality = str(body.get("quality") or "auto").replace("auto", "high")
        size = str(body.get("size") or "auto").replace("auto", "1024x1024")
        prompt_tokens, image_tokens = words(prompt), n * _IMAGE_TOKENS.get(quality, 4160)
        answer.update(size=size, quality=quality, usage={
            "input_tokens": prompt_tokens, "output_tokens": image_tokens, "total_tokens": prompt_tokens + image_tokens,
            "input_tokens_details": {"text_tokens": prompt_tokens, "image_tokens": 0}})
    return answer


def heard_seconds(audio: bytes) -> float:
    """How long the fake hears ``audio`` last: a WAV file's frames, else its size at 32 kbit/s."""
    try:
        with wave.open(io.BytesIO(audio)) as wav:
            return float(wav.getnframes() / wav.getframerate())
    except (wave.Error, EOFError, ZeroDivisionError):
        return len(audio) * 8 / _FAKE_BITRATE_BPS


def openai_transcription(body: Mapping[str, Any]) -> dict[str, Any] | FakeBinary:
    """A ``Transcription``: text from the audio's length; usage in seconds (whisper) or tokens
    (gpt-4o models); ``verbose_json`` adds the language and duration, ``text`` is plain text."""
    file = body.get("file")
    audio = file if isinstance(file, bytes) else b""
    seconds = heard_seconds(audio)
    text = f"fake transcript of {len(audio)} bytes"
    model, form = str(body.get("model", "")), body.get("response_format") or "json"
    if form == "text":
        return FakeBinary(text.encode(), "text/plain; charset=utf-8")
    usage: dict[str, Any] = {"type": "duration", "seconds": math.ceil(seconds)}
    if model.startswith("gpt-4o"):
        audio_tokens, output = math.ceil(seconds * 10), words(text)
        usage = {"type": "tokens", "input_tokens": audio_tokens, "output_tokens": output,
                 "total_tokens": audio_tokens + output, "input_token_details": {"audio_tokens": audio_tokens,
                                                                               "text_tokens": 0}}
    answer: dict[str, Any] = {"text": text, "usage": usage}
    if form == "verbose_json":
        answer.update(task="transcribe", language=body.get("language") or "english",
                      duration=round(seconds, 3), segments=[])
    return answer


def openai_speech(body: Mapping[str, Any]) -> FakeBinary:
    """The text spoken: silence, 10 ms a character, as the format asked (WAV, raw PCM, or bytes
    that open as an MP3, Opus, AAC or FLAC file does)."""
    form = str(body.get("response_format") or "mp3")
    samples = _SAMPLES_PER_CHARACTER * len(str(body.get("input", "")))
    pcm = bytes(2 * samples)
    if form == "wav":
        buffer = io.BytesIO()
        with wave.open(buffer, "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(_SPEECH_RATE)
            wav.writeframes(pcm)
        return FakeBinary(buffer.getvalue(), "audio/wav")
    data = pcm if form == "pcm" else _MAGIC.get(form, b"") + bytes(len(pcm) // 16)
    return FakeBinary(data, _SPEECH_TYPES.get(form, "application/octet-stream"))


class OpenAIMediaWire(OpenAIWire):
    """OpenAI's media routes under ``/v1``: image generations and edits, transcriptions, speech."""

    routes: Mapping[str, str] = {"images": "/v1/images/generations", "image_edits": "/v1/images/edits",
                                 "transcriptions": "/v1/audio/transcriptions", "speech": "/v1/audio/speech"}

    def streams(self, route: str, body: Mapping[str, Any]) -> bool:
        return False

    def answer(self, route: str, body: Mapping[str, Any], count: Tokenizer) -> Any:
        """JSON, or a ``FakeBinary`` (speech; a transcript asked for as text)."""
        if route == "speech":
            return openai_speech(body)
        if route == "transcriptions":
            return openai_transcription(body)
        return openai_images(body)

    def with_usage(self, payload: Any, usage: Mapping[str, Any]) -> Any:
        """A fault's usage replaces a JSON answer's; bytes carry none."""
        return payload if isinstance(payload, FakeBinary) else super().with_usage(payload, usage)


def wav(seconds: float, rate: int = 16_000, channels: int = 1, width: int = 2) -> bytes:
    """A silent PCM WAV file of ``seconds``: audio a test can transcribe, whose duration its header states."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(width)
        out.setframerate(rate)
        out.writeframes(bytes(int(rate * seconds) * channels * width))
    return buffer.getvalue()
