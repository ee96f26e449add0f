from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw._transport.reads import ReadRefused
from provmw._transport.sse import SSEDecoder, SSEEvent


def decode(*chunks: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    return [event for chunk in chunks for event in decoder.feed(chunk)] + decoder.flush()


def test_comment_lines_are_skipped() -> None:
    assert decode(b": keep-alive\n\ndata: x\n\n") == [SSEEvent("x")]


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert decode(b"data: one\ndata: two\n\n") == [SSEEvent("one\ntwo")]


def test_event_field_names_the_event() -> None:
    assert decode(b"event: message_stop\ndata: {}\n\n") == [SSEEvent("{}", "message_stop")]


def test_crlf_split_across_chunks() -> None:
    assert decode(b"data: a\r", b"\n\r", b"\n") == [SSEEvent("a")]


def test_bare_cr_line_endings() -> None:
    assert decode(b"data: a\r\rdata: b\r\r") == [SSEEvent("a"), SSEEvent("b")]


def test_event_split_byte_by_byte() -> None:
    payload = b"data: hello\n\n"
    assert decode(*(payload[i:i + 1] for i in range(len(payload)))) == [SSEEvent("hello")]


def test_multibyte_utf8_split_across_chunks() -> None:
    payload = "data: héllo ✓\n\n".encode()
    assert decode(payload[:8], payload[8:12], payload[12:]) == [SSEEvent("héllo ✓")]


def test_very_long_line_survives() -> None:
    body = b"x" * 5_000_000
    chunks = [b"data: "] + [body[i:i + 65536] for i in range(0, len(body), 65536)] + [b"\n\n"]
    events = decode(*chunks)
    assert len(events) == 1
    assert len(events[0].data) == 5_000_000


def test_event_without_blank_line_at_eof_is_dropped() -> None:
    assert decode(b"data: a\r") == []


def test_incomplete_event_is_not_dispatched() -> None:
    assert decode(b"data: partial\n") == []


def test_done_marker_is_an_ordinary_event_for_the_adapter_to_stop_on() -> None:
    assert decode(b"data: [DONE]\n\n") == [SSEEvent("[DONE]")]


LINE = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=30)
EVENTS = st.lists(st.lists(LINE, min_size=1, max_size=3), max_size=5)


def _wire(events: list[list[str]]) -> bytes:
    return "".join("".join(f"data: {line}\n" for line in lines) + "\n" for lines in events).encode()


def _split(payload: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(payload), *(c % (len(payload) + 1) for c in cuts)})
    return [payload[a:b] for a, b in itertools.pairwise(points)]


@given(EVENTS, st.lists(st.integers(min_value=0), max_size=20))
def test_any_chunking_gives_the_same_events(events: list[list[str]], cuts: list[int]) -> None:
    expected = [SSEEvent("\n".join(lines)) for lines in events]
    assert decode(*_split(_wire(events), cuts)) == expected


@given(st.integers(min_value=1, max_value=64), st.lists(st.integers(min_value=0), max_size=20))
def test_a_line_over_the_limit_is_refused_however_it_arrives(limit: int, cuts: list[int]) -> None:
    chunks = _split(b": " + b"x" * limit + b"\n", cuts)
    with pytest.raises(ReadRefused, match="SSE line"):
        decode_limited(limit, *chunks)


def decode_limited(limit: int, *chunks: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder(max_event_bytes=limit)
    return [event for chunk in chunks for event in decoder.feed(chunk)]


def test_a_line_at_the_limit_is_read() -> None:
    decoder = SSEDecoder(max_event_bytes=8)
    assert decoder.feed(b"data: ab\n\n") == [SSEEvent("ab")]


def test_an_event_whose_lines_add_up_past_the_limit_is_refused() -> None:
    decoder = SSEDecoder(max_event_bytes=16)
    with pytest.raises(ReadRefused, match="SSE event's data") as caught:
        decoder.feed(b"data: 123456\ndata: 123456\ndata: 123456\n")
    assert caught.value.limit_bytes == 16


def test_the_event_budget_starts_again_after_each_event() -> None:
    decoder = SSEDecoder(max_event_bytes=16)
    assert decoder.feed(b"data: 123456\n\n" * 10) == [SSEEvent("123456")] * 10

