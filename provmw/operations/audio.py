"""Audio: speech to text (transcription of an uploaded file) and text to speech.

A transcription is billed by the second of audio (``audio_second``), a speech by the
character spoken (``character``), ADR 0053. The worst case of a transcription comes from the
audio itself, before anything is sent (:func:`audio_seconds_bound`), read from what the file is,
never from its name: a PCM WAV file says its duration in its header, exactly; a FLAC file in its
STREAMINFO block (total samples over the sample rate), exactly; an MP3 file is bounded by its
size (:data:`MP3_LEAST_BYTES_PER_SECOND`). Anything else has no bound: formats that hold silence
in almost nothing (Opus, Ogg or WebM with DTX, AAC) can last hours in a few kilobytes, so no
bitrate floor holds for them. Such a call's worst case is unknown (:data:`UNBOUNDED_AUDIO`): a
strict cost limit refuses it before it is sent, any other call goes out. The same whole seconds
(:func:`most_audio_seconds`) are the reservation and the most an answer may report; the answer's
own figure (``usage.seconds``, or ``duration`` in ``verbose_json``) is what is billed when the
provider says it, else the bound.

A transcription at temperature 0 (whisper's default, when no temperature is set) is
deterministic and may be cached; speech is generated media, never cached by default.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import struct
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from provmw._base import serde
from provmw._base.strict_json import plain_json
from provmw.context import FrozenMap
from provmw.errors import ConfigurationError
from provmw.responses import ProviderResponse

__all__ = ["AUDIO_FORMATS", "MEDIA_TYPES", "MIN_TRANSCRIPT_TOKENS", "MOST_FILENAME_CHARS", "MOST_REPORTED_SECONDS",
           "MP3_LEAST_BYTES_PER_SECOND", "TRANSCRIPT_TOKENS_PER_SECOND", "UNBOUNDED_AUDIO", "SpeechRequest",
           "SpeechResponse", "TranscriptionRequest", "TranscriptionResponse", "audio_seconds_bound",
           "most_audio_seconds"]

# Speech runs at 2 to 4 words a second, some 3 to 8 tokens, more in scripts a tokenizer splits
# finely: 20 a second bounds a transcript with room to spare.
TRANSCRIPT_TOKENS_PER_SECOND = 20
MIN_TRANSCRIPT_TOKENS = 100
# MPEG audio's smallest frames for their length: 8 kbit/s (MPEG-2 and 2.5's lowest bitrate; MPEG-1
# starts at 32), whose Layer II and III frames hold floor(72 * 8000 / rate) bytes (144 for Layer II's
# twice as long frames): 52 bytes for 576 samples at 11,025 Hz, 995.3 bytes a second. Frames never
# overlap (the bit reservoir lends space inside them, not beyond), so a file of ``b`` bytes of MP3
# frames lasts at most ``b / 995`` seconds; free-format streams (no bitrate stated) are not taken.
MP3_LEAST_BYTES_PER_SECOND = 995
# What an answer may report for audio whose file gives no bound: a day, far past any upload (25 MB).
MOST_REPORTED_SECONDS = 24 * 3600
# The unit a transcription of unbounded audio is reserved (and, when its answer says no seconds,
# billed) in: no price names it, so its worst case (and such a bill) is unknown, never a guess.
UNBOUNDED_AUDIO = "audio_second:unbounded"
# What each speech format is sent as (OpenAI's ``response_format`` names).
MEDIA_TYPES: Mapping[str, str] = {"mp3": "audio/mpeg", "opus": "audio/opus", "aac": "audio/aac",
                                  "flac": "audio/flac", "wav": "audio/wav", "pcm": "audio/pcm"}
AUDIO_FORMATS = tuple(MEDIA_TYPES)
_PCM_FORMATS = frozenset({1, 3, 0xFFFE})  # integer, float, extensible: a duration the header states exactly


def audio_seconds_bound(audio: bytes) -> float | None:
    """The most seconds ``audio`` can last (the module's docstring says how); None when unknown."""
    for seconds in (_wav_seconds, _flac_seconds, _mp3_seconds):
        found = seconds(audio)
        if found is not None:
            return found
    return None


def most_audio_seconds(audio: bytes) -> int | None:
    """The most whole seconds a transcription of ``audio`` may be billed: what it reserves, and the
    most its answer may report (None: no bound, see :data:`UNBOUNDED_AUDIO`)."""
    bound = audio_seconds_bound(audio)
    return None if bound is None else math.ceil(bound)


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


def _flac_seconds(audio: bytes) -> float | None:
    """A FLAC file's duration from its STREAMINFO (the first metadata block, always): total samples
    over the sample rate; None when it states no total (0) or is no FLAC file."""
    if len(audio) < 26 or audio[:4] != b"fLaC" or audio[4] & 0x7F != 0:
        return None
    info = int.from_bytes(audio[18:26], "big")
    rate, samples = info >> 44, info & ((1 << 36) - 1)
    return samples / rate if rate and samples else None


_MPEG_BITRATE_INDEXES = range(1, 15)  # 0 is free format (any bitrate, none bounded), 15 is invalid


def _mp3_seconds(audio: bytes) -> float | None:
    """An MP3 file's size over :data:`MP3_LEAST_BYTES_PER_SECOND`, the file known by its first frame's
    header (after an ID3v2 tag, if any); None for anything else."""
    at = 0
    if audio[:3] == b"ID3" and len(audio) >= 10:
        size = int.from_bytes(bytes(b & 0x7F for b in audio[6:10]), "big")  # syncsafe: 7 bits a byte
        at = 10 + size + (10 if audio[5] & 0x10 else 0)  # a footer, when flagged
    head = audio[at:at + 4]
    if len(head) < 4 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return None
    version, layer, bitrate, rate = head[1] >> 3 & 3, head[1] >> 1 & 3, head[2] >> 4, head[2] >> 2 & 3
    if version == 1 or layer == 0 or bitrate not in _MPEG_BITRATE_INDEXES or rate == 3:
        return None
    return len(audio) / MP3_LEAST_BYTES_PER_SECOND


def _frozen(value: Mapping[str, Any] | None) -> FrozenMap:
    if value is not None and not isinstance(value, Mapping):
        raise ConfigurationError(f"options must be a mapping of option names to values, got {type(value).__name__}")
    return value if isinstance(value, FrozenMap) else FrozenMap(value)


def _text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{attribute.name} must be a non-empty string, got {value!r:.40}")


MOST_FILENAME_CHARS = 255  # the longest file name common file systems keep


def _filename(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A file's name as a multipart upload sends it in a header: no control characters (a line break
    would end the header), no path (only the name is the provider's business), of a bounded length."""
    _text(instance, attribute, value)
    assert isinstance(value, str)
    if len(value) > MOST_FILENAME_CHARS or any(c in "/\\" or unicodedata.category(c) == "Cc" for c in value):
        raise ConfigurationError(f"filename must be a file's name of at most {MOST_FILENAME_CHARS} characters, "
                                 f"without control characters or path separators, got {value!r:.60}")


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
    filename: str = attrs.field(default="audio.wav", validator=_filename)
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
        ``MIN_TRANSCRIPT_TOKENS`` at least; None for audio of no known bound."""
        bound = audio_seconds_bound(self.audio)
        return None if bound is None else max(MIN_TRANSCRIPT_TOKENS, math.ceil(bound * TRANSCRIPT_TOKENS_PER_SECOND))

    def most_units(self, options: Mapping[str, Any]) -> Mapping[str, float]:
        """The seconds of :func:`most_audio_seconds`; for audio of no known bound one
        :data:`UNBOUNDED_AUDIO`, which no price names: the worst case is unknown, not guessed."""
        most = most_audio_seconds(self.audio)
        return {UNBOUNDED_AUDIO: 1.0} if most is None else {"audio_second": float(most)}

    def unknown_worst_case(self, options: Mapping[str, Any]) -> str | None:
        """Why no bound before sending holds the seconds billed (None: one does)."""
        if most_audio_seconds(self.audio) is not None:
            return None
        return ("its audio states no duration a bound could be read from (only WAV, FLAC and MP3 do); send one of "
                "those, or use the budget's estimate mode")

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
