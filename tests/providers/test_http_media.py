"""HttpClient's uploads and binary answers: ``post_form`` and ``post_bytes`` send and read as
``post_json`` does, bounded and with its errors."""

from __future__ import annotations

import json

import pytest

from provmw._transport.reads import ReadRefused
from provmw.http import HttpClient, HttpStatusError, NotJsonError, ReadLimits
from tests.hostile import HostileProvider


async def test_a_form_goes_as_multipart_whatever_content_type_the_headers_name(hostile: HostileProvider,
                                                                               http: HttpClient) -> None:
    hostile.answer(json.dumps({"ok": True}), headers={"x-request-id": "r1"})
    data, headers = await http.post_form(f"{hostile.url}/up", {"model": "m"}, {"file": ("a.wav", b"RIFF", "audio/wav")},
                                         {"Content-Type": "application/json", "Authorization": "Bearer k"})
    seen = hostile.requests[-1]
    assert data == {"ok": True} and headers["x-request-id"] == "r1"
    assert seen.headers["Content-Type"].startswith("multipart/form-data; boundary=")
    assert b'filename="a.wav"' in seen.body and b"RIFF" in seen.body and seen.headers["Authorization"] == "Bearer k"


async def test_a_forms_error_status_and_a_body_not_json_are_raised_as_post_json_raises_them(
        hostile: HostileProvider, http: HttpClient) -> None:
    hostile.answer('{"error": "no"}', status=429)
    with pytest.raises(HttpStatusError) as raised:
        await http.post_form(f"{hostile.url}/up", {}, {"file": ("a", b"x", "audio/wav")}, {})
    assert raised.value.status == 429
    hostile.answer("plain words", content_type="text/plain")
    with pytest.raises(NotJsonError):
        await http.post_form(f"{hostile.url}/up", {}, {"file": ("a", b"x", "audio/wav")}, {})


async def test_bytes_come_back_as_they_are_with_their_content_type(hostile: HostileProvider, http: HttpClient) -> None:
    hostile.answer(b"\xff\xfb\x00\x01", content_type="audio/mpeg")
    data, content_type, _ = await http.post_bytes(f"{hostile.url}/speak", {"input": "hi"}, {})
    assert (data, content_type) == (b"\xff\xfb\x00\x01", "audio/mpeg")
    assert json.loads(hostile.requests[-1].body) == {"input": "hi"}


async def test_bytes_past_the_body_limit_are_refused(hostile: HostileProvider) -> None:
    hostile.flood(10_000, content_type="audio/mpeg")
    http = HttpClient(limits=ReadLimits(max_body_bytes=1_000))
    try:
        with pytest.raises(ReadRefused):
            await http.post_bytes(f"{hostile.url}/speak", {"input": "hi"}, {})
    finally:
        await http.aclose()
