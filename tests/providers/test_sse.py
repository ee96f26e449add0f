from __future__ import annotations

from provmw.providers._sse import SSEDecoder, SSEEvent


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
