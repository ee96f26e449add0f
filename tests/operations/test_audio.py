"""TranscriptionRequest and SpeechRequest: validation, the bound on seconds, determinism; their responses."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import wave
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provmw.context import ProviderOperation
from provmw.errors import ConfigurationError, InvalidDataError
from provmw.operations import OPERATIONS, response_types
from provmw.operations.audio import (
    UNBOUNDED_AUDIO,
    SpeechRequest,
    SpeechResponse,
    TranscriptionRequest,
    TranscriptionResponse,
    audio_seconds_bound,
    most_audio_seconds,
)
from provmw.responses import Usage
from provmw.testing import wav


@pytest.mark.parametrize(("fields", "named"), [
    ({"audio": b""}, "audio"),
    ({"audio": "a.wav"}, "audio"),
    ({"audio": b"x", "filename": ""}, "filename"),
    ({"audio": b"x", "filename": "a.wav\r\nX-Injected: 1"}, "filename"),
    ({"audio": b"x", "filename": "../../etc/a.wav"}, "filename"),
    ({"audio": b"x", "filename": "a\\b.wav"}, "filename"),
    ({"audio": b"x", "filename": "a" * 252 + ".wav"}, "filename"),
    ({"audio": b"x", "language": 3}, "language"),
    ({"audio": b"x", "prompt": ""}, "prompt"),
    ({"audio": b"x", "options": {"temperature": 2}}, "temperature"),
    ({"audio": b"x", "options": {"temperature": "hot"}}, "temperature"),
])
def test_a_wrong_transcription_field_is_a_configuration_error_naming_it(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        TranscriptionRequest(**fields)


@pytest.mark.parametrize(("fields", "named"), [
    ({"text": ""}, "text"), ({"text": None}, "text"), ({"text": "hi", "voice": ""}, "voice"),
    ({"text": "hi", "audio_format": "ogg"}, "audio_format"),
])
def test_a_wrong_speech_field_is_a_configuration_error_naming_it(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        SpeechRequest(**fields)


@pytest.mark.parametrize(("rate", "channels", "width"), [(16_000, 1, 2), (44_100, 2, 2), (8_000, 1, 1)])
def test_a_wav_header_gives_the_duration_exactly(rate: int, channels: int, width: int) -> None:
    assert audio_seconds_bound(wav(2.5, rate, channels, width)) == pytest.approx(2.5, abs=1e-4)


def test_a_truncated_wav_lasts_as_long_as_the_data_present() -> None:
    assert audio_seconds_bound(wav(4.0)[:44 + 32_000]) == pytest.approx(1.0)


def test_a_wav_whose_rates_disagree_has_no_bound() -> None:
    audio = bytearray(wav(1.0))
    struct.pack_into("<I", audio, 28, 1)  # byte rate 1: the header would claim 32,000 seconds
    assert audio_seconds_bound(bytes(audio)) is None


MP3_HEAD = b"\xff\xfb\x90\x00"  # MPEG-1 Layer III, 128 kbit/s, 44.1 kHz


def flac(samples: int, rate: int = 8_000) -> bytes:
    info = bytes(10) + (rate << 44 | 15 << 36 | samples).to_bytes(8, "big") + bytes(16)
    return b"fLaC" + bytes([0x80, 0, 0, 34]) + info + b"\xff\xf8" + bytes(20)


def test_a_flac_file_lasts_the_samples_its_streaminfo_states() -> None:
    assert audio_seconds_bound(flac(3600 * 8_000)) == 3600.0
    assert audio_seconds_bound(flac(0)) is None  # a total of 0: unknown


def test_an_mp3_file_is_bounded_by_its_size_at_mpegs_least_bytes_a_second() -> None:
    assert audio_seconds_bound(MP3_HEAD + bytes(7_956)) == 8.0
    tag = b"ID3\x04\x00\x00\x00\x00\x00\x0a" + bytes(10)  # an ID3v2 tag of 10 bytes, then the frames
    assert audio_seconds_bound(tag + MP3_HEAD + bytes(7_936)) == 8.0


@pytest.mark.parametrize("audio", [b"OggS" + bytes(100), b"\xff\xfb" * 3_000, b"\xff\xfb\x00\x00" + bytes(100),
                                   b"ID3\x04\x00\x00\x00\x00\x00\x0a" + bytes(100)])
def test_any_other_file_has_no_bound(audio: bytes) -> None:
    assert audio_seconds_bound(audio) is None and most_audio_seconds(audio) is None


def test_the_worst_case_is_the_bound_rounded_up_in_audio_seconds() -> None:
    assert TranscriptionRequest(wav(2.5)).most_units({}) == {"audio_second": 3.0}
    assert TranscriptionRequest(MP3_HEAD + bytes(7_956), filename="a.mp3").most_units({}) == {"audio_second": 8.0}


def test_audio_of_no_bound_is_reserved_in_a_unit_no_price_names() -> None:
    request = TranscriptionRequest(b"OggS" + bytes(100), filename="a.ogg")
    assert request.most_units({}) == {UNBOUNDED_AUDIO: 1.0} and request.most_output_tokens({}) is None


def test_speech_is_billed_by_the_character() -> None:
    assert SpeechRequest("héllo wörld").most_units({}) == {"character": 11.0}
    assert SpeechRequest("héllo").input_bytes() == 6


@pytest.mark.parametrize(("options", "deterministic"), [({}, True), ({"temperature": 0}, True),
                                                        ({"temperature": 0.2}, False)])
def test_a_transcription_is_deterministic_unless_a_temperature_is_set(options: dict[str, Any],
                                                                      deterministic: bool) -> None:
    assert TranscriptionRequest(b"x").deterministic(options) is deterministic


def test_speech_is_never_deterministic_and_is_generated_media() -> None:
    assert not SpeechRequest("hi").deterministic({"temperature": 0})
    assert OPERATIONS[ProviderOperation.SPEECH].generated
    assert not OPERATIONS[ProviderOperation.TRANSCRIPTION].generated


def test_each_needs_its_own_capability_and_speech_bills_no_output_tokens() -> None:
    transcription, speech = TranscriptionRequest(b"x"), SpeechRequest("hi")
    assert transcription.needs(streaming=False) == frozenset({"transcription"})
    assert speech.needs(streaming=False) == frozenset({"speech"})
    assert speech.most_output_tokens({}) == 0


def test_a_transcripts_tokens_are_bounded_by_the_seconds_of_audio() -> None:
    assert TranscriptionRequest(wav(1.0)).most_output_tokens({}) == 100
    assert TranscriptionRequest(wav(60.0)).most_output_tokens({}) == 1200


def test_the_canonical_form_holds_the_audios_digest_never_its_bytes() -> None:
    body = TranscriptionRequest(b"secret audio", language="en").to_dict()
    assert body["audio"] == hashlib.sha256(b"secret audio").hexdigest() and body["language"] == "en"
    assert "secret" not in json.dumps(body)


def test_the_texts_a_guard_may_rewrite_are_the_prompt_and_the_text_spoken() -> None:
    assert TranscriptionRequest(b"x").texts() == ()
    assert TranscriptionRequest(b"x", prompt="names").with_texts(["NAMES"]).prompt == "NAMES"
    assert SpeechRequest("hi").with_texts(["ho"]) == SpeechRequest("ho")
    with pytest.raises(ConfigurationError, match="texts"):
        TranscriptionRequest(b"x").with_texts(["extra"])


def test_responses_round_trip_through_plain_json() -> None:
    for response in (TranscriptionResponse(provider="openai", model="whisper-1", text="hi", language="en",
                                           duration_s=2.5, usage=Usage(units={"audio_second": 3})),
                     SpeechResponse(provider="openai", model="tts-1", audio=b"\x00\xff", media_type="audio/wav",
                                    usage=Usage(units={"character": 2}))):
        data = json.loads(json.dumps(response.to_dict()))
        assert response_types()[data["type"]].from_dict(data) == response
    assert response_types()["speech"] is SpeechResponse and response_types()["transcription"] is TranscriptionResponse


def test_speech_audio_is_base64_in_the_dict_and_refused_when_it_is_not() -> None:
    data = SpeechResponse(provider="p", model="m", audio=b"\x00\x01").to_dict()
    assert data["audio"] == "AAE="
    with pytest.raises(InvalidDataError, match="base64"):
        SpeechResponse.from_dict({**data, "audio": "**"})


def test_a_negative_duration_is_refused() -> None:
    with pytest.raises(InvalidDataError, match="duration_s"):
        TranscriptionResponse.from_dict({**TranscriptionResponse(provider="p", model="m").to_dict(), "duration_s": -1})


@settings(max_examples=200, deadline=None)
@given(rate=st.integers(1, 192_000), channels=st.integers(1, 8), width=st.sampled_from([1, 2, 3, 4]),
       frames=st.integers(0, 4_000))
def test_every_pcm_wav_lasts_its_frames_over_its_rate(rate: int, channels: int, width: int, frames: int) -> None:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(width)
        out.setframerate(rate)
        out.writeframes(bytes(frames * channels * width))
    assert audio_seconds_bound(buffer.getvalue()) == pytest.approx(frames / rate)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([b"RIFF\x00\x00\x00\x00WAVE", b"fLaC", b"ID3", b"\xff\xfb", b""])
       .flatmap(lambda head: st.binary(max_size=200).map(lambda tail: head + tail)))
def test_any_bytes_get_no_bound_or_a_finite_one_of_zero_or_more_and_never_an_error(audio: bytes) -> None:
    bound = audio_seconds_bound(audio)
    assert bound is None or 0 <= bound < float("inf")
