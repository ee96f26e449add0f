"""Audio: speech to text (transcription of an uploaded file) and text to speech.

A transcription is billed by the second of audio (``audio_second``), a speech by the
character spoken (``character``), ADR 0053. The worst case of a transcription comes from the
audio itself, before anything is sent (:func:`audio_seconds_bound`): a PCM WAV file says its
duration in its header, exactly; any other file is bounded by its size at the lowest bitrate a
codec the provider decodes can carry speech at. That is Opus at 6 kbit/s (its floor; MP3 and
AAC go no lower than 8), so a file of ``b`` bytes holds at most ``b * 8 / 6000`` seconds: far
above the truth for music-grade files, never below it for any file the wire accepts. The
answer's own figure (``usage.seconds``, or ``duration`` in ``verbose_json``) is what is billed
when the provider says it, else the bound.

A transcription at temperature 0 (whisper's default, when no temperature is set) is
deterministic and may be cached; speech is generated media, never cached by default.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from provmw._base import serde
from provmw._base.strict_json import plain_json
from provmw.context import FrozenMap
from provmw.errors import ConfigurationError
from provmw.responses import ProviderResponse

__all__ = ["AUDIO_FORMATS", "LOWEST_SPEECH_BITRATE_BPS", "MEDIA_TYPES", "MIN_TRANSCRIPT_TOKENS",
           "TRANSCRIPT_TOKENS_PER_SECOND", "SpeechRequest", "SpeechResponse",
           "TranscriptionRequest", "TranscriptionResponse", "audio_seconds_bound"]

# Speech runs at 2 to 4 words a second, some 3 to 8 tokens, more in scripts a tokenizer splits
# finely: 20 a second bounds a transcript with room to spare.
TRANSCRIPT_TOKENS_PER_SECOND = 20
MIN_TRANSCRIPT_TOKENS = 100
LOWEST_SPEECH_BITRATE_BPS = 6000  # Opus's floor: the module's docstring says why this bounds every file
# What each speech format is sent as (OpenAI's ``response_format`` names).
MEDIA_TYPES: Mapping[str, str] = {"mp3": "audio/mpeg", "opus": "audio/opus", "aac": "audio/aac",
                                  "flac": "audio/flac", "wav": "audio/wav", "pcm": "audio/pcm"}
AUDIO_FORMATS = tuple(MEDIA_TYPES)
_PCM_FORMATS = frozenset({1, 3, 0xFFFE})  # integer, float, extensible: a duration the header states exactly


def audio_seconds_bound(audio: bytes) -> float:
    """The most seconds ``audio`` can last: a PCM WAV header's duration, else the size at 6 kbit/s."""
    exact = _wav_seconds(audio)
    return exact if exact is not None else len(audio) * 8 / LOWEST_SPEECH_BITRATE_BPS


def _wav_seconds(audio: bytes) -> float | None:
    """The duration a PCM WAV file's header states (its data as far as it is present); None for
    anything else, or a header whose rates do not agree with each other."""
    if len(audio) < 12 or audio[:4] != b"RIFF" or audio[8:12] != b"WAVE":
        return None
    byte_rate, at = None, 12
    while at + 8 <= len(audio):
        chunk, size = audio[at:at + 4], struct.unpack_from("<I", audio, at + 4)[0]
        if chunk == b"fmt " and size >= 16 and at + 24 <= len(audio):
            byte_rate = _pcm_byte_rate(audio, at + 8)
        elif chunk == b"data":
            present = min(size, len(audio) - at - 8)
            return present / byte_rate if byte_rate else None
        at += 8 + size + (size & 1)  # chunks are padded to an even size
    return None


def _pcm_byte_rate(audio: bytes, at: int) -> int | None:
    kind, channels, rate, byte_rate, align, bits = struct.unpack_from("<HHIIHH", audio, at)
    consistent = align == channels * bits // 8 and byte_rate == rate * align
    return byte_rate if kind in _PCM_FORMATS and consistent and byte_rate > 0 else None


def _frozen(value: Mapping[str, Any] | None) -> FrozenMap:
    if value is not None and not isinstance(value, Mapping):
        raise ConfigurationError(f"options must be a mapping of option names to values, got {type(value).__name__}")
    return value if isinstance(value, FrozenMap) else FrozenMap(value)


def _text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{attribute.name} must be a non-empty string, got {value!r:.40}")


def _optional_text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _text(instance, attribute, value)


def _audio(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bytes) or not value:
        raise ConfigurationError(f"audio must be non-empty bytes, got {type(value).__name__}")


def _format(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in MEDIA_TYPES:
        raise ConfigurationError(f"audio_format must be one of {', '.join(AUDIO_FORMATS)}, got {value!r:.40}")


def _temperature(options: Mapping[str, Any]) -> float:
    value = options.get("temperature")
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ConfigurationError(f"options.temperature must be a number from 0 to 1, got {value!r:.40}")
    return float(value)


@attrs.frozen
class TranscriptionRequest:
    """Audio to transcribe (a file's bytes, its name telling its format), in ``language`` when known,
    with a ``prompt`` of the words and style to expect."""

    audio: bytes = attrs.field(validator=_audio, repr=lambda audio: f"<{len(audio)} bytes>")
    filename: str = attrs.field(default="audio.wav", validator=_text)
    language: str | None = attrs.field(default=None, validator=_optional_text)
    prompt: str | None = attrs.field(default=None, validator=_optional_text)
    options: FrozenMap = attrs.field(factory=FrozenMap, converter=_frozen)

    def __attrs_post_init__(self) -> None:
        _temperature(self.options)

    def to_dict(self) -> dict[str, Any]:
        return {"audio": hashlib.sha256(self.audio).hexdigest(), "filename": self.filename,
                "language": self.language, "prompt": self.prompt, "options": plain_json(self.options)}

    def needs(self, *, streaming: bool) -> frozenset[str]:
        return frozenset({"transcription"})

    def input_bytes(self) -> int:
        return len((self.prompt or "").encode("utf-8"))

    def estimate_tokens(self) -> int:
        return len(self.prompt or "") // 4 + 1

    def most_output_tokens(self, options: Mapping[str, Any]) -> int | None:
        """gpt-4o-transcribe reports the transcript's tokens (priced at 0 in the bundled table: the
        seconds carry the cost): at most ``TRANSCRIPT_TOKENS_PER_SECOND`` a second, and
        ``MIN_TRANSCRIPT_TOKENS`` at least."""
        return max(MIN_TRANSCRIPT_TOKENS, math.ceil(audio_seconds_bound(self.audio) * TRANSCRIPT_TOKENS_PER_SECOND))

    def most_units(self, options: Mapping[str, Any]) -> Mapping[str, float]:
        return {"audio_second": float(math.ceil(audio_seconds_bound(self.audio)))}

    def deterministic(self, options: Mapping[str, Any]) -> bool:
        return _temperature(options) == 0

    def texts(self) -> tuple[str, ...]:
        return () if self.prompt is None else (self.prompt,)

    def with_texts(self, texts: Sequence[str]) -> TranscriptionRequest:
        """The same request with its prompt replaced (the audio is bytes: a guard leaves it alone)."""
        if len(texts) != len(self.texts()):
            raise ConfigurationError(f"texts: this transcription has {len(self.texts())} text(s), got {len(texts)}")
        return attrs.evolve(self, prompt=texts[0]) if texts else self


@attrs.frozen
class SpeechRequest:
    """Text to speak in ``voice``, returned as ``audio_format``."""

    text: str = attrs.field(validator=_text)
    voice: str = attrs.field(default="alloy", validator=_text)
    audio_format: str = attrs.field(default="mp3", validator=_format)
    options: FrozenMap = attrs.field(factory=FrozenMap, converter=_frozen)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "voice": self.voice, "audio_format": self.audio_format,
                "options": plain_json(self.options)}

    def needs(self, *, streaming: bool) -> frozenset[str]:
        return frozenset({"speech"})

    def input_bytes(self) -> int:
        return len(self.text.encode("utf-8"))

    def estimate_tokens(self) -> int:
        return len(self.text) // 4 + 1

    def most_output_tokens(self, options: Mapping[str, Any]) -> int | None:
        return 0  # billed by the character (gpt-4o-mini-tts's tokens are priced through them)

    def most_units(self, options: Mapping[str, Any]) -> Mapping[str, float]:
        return {"character": float(len(self.text))}

    def deterministic(self, options: Mapping[str, Any]) -> bool:
        return False

    def texts(self) -> tuple[str, ...]:
        return (self.text,)

    def with_texts(self, texts: Sequence[str]) -> SpeechRequest:
        """The same request with its text replaced."""
        if len(texts) != 1:
            raise ConfigurationError(f"texts: a speech request has 1 text, got {len(texts)}")
        return attrs.evolve(self, text=texts[0])


def _seconds(value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ConfigurationError(f"duration_s must be a number of 0 or more, got {value!r:.40}")
    return float(value)


@attrs.frozen(kw_only=True)
class TranscriptionResponse(ProviderResponse):
    """The audio's text; its language and duration when the provider said them."""

    TYPE = "transcription"

    text: str = ""
    language: str | None = None
    duration_s: float | None = attrs.field(default=None, converter=_seconds)

    @classmethod
    def _fields_from(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        where = cls.TYPE
        duration = data.get("duration_s")
        return {**super()._fields_from(data), "text": serde.get(data, "text", str, where),
                "language": serde.get(data, "language", str, where, default=None),
                "duration_s": None if duration is None else serde.finite(duration, f"{where}.duration_s")}


def _audio_bytes(value: object) -> bytes:
    if not isinstance(value, bytes):
        raise ConfigurationError(f"audio must be bytes, got {type(value).__name__}")
    return value


@attrs.frozen(kw_only=True)
class SpeechResponse(ProviderResponse):
    """The spoken audio's bytes and their media type (``audio/mpeg``, ``audio/wav``, ...)."""

    TYPE = "speech"

    audio: bytes = attrs.field(default=b"", converter=_audio_bytes, repr=lambda audio: f"<{len(audio)} bytes>")
    media_type: str = "application/octet-stream"

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "audio": base64.b64encode(self.audio).decode("ascii")}

    @classmethod
    def _fields_from(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        where = cls.TYPE
        try:
            audio = base64.b64decode(serde.get(data, "audio", str, where), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigurationError("audio: expected base64 text") from None
        return {**super()._fields_from(data), "audio": audio,
                "media_type": serde.get(data, "media_type", str, where)}
