"""The event-stream codec: what the fake encodes, botocore decodes, and so does the adapter's decoder."""

from __future__ import annotations

import struct
import zlib

import pytest
from botocore.eventstream import EventStreamBuffer
from provmw_bedrock.eventstream import (
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    EventStreamDecoder,
    EventStreamError,
    EventTooLargeError,
    HeaderValue,
    encode_message,
)

HEADERS: dict[str, HeaderValue] = {":event-type": "contentBlockDelta", ":message-type": "event", "count": 7,
                                   "flag": True, "raw": b"\x00\x01"}
MESSAGE = encode_message(HEADERS, b'{"delta":{"text":"hi"}}')


def test_botocore_decodes_an_encoded_message() -> None:
    buffer = EventStreamBuffer()
    buffer.add_data(MESSAGE)
    decoded = next(iter(buffer))
    headers: object = decoded.headers  # botocore-stubs call it an int; it is the headers' dict
    assert (headers, decoded.payload) == (HEADERS, b'{"delta":{"text":"hi"}}')


def test_messages_split_at_every_byte_decode_whole() -> None:
    decoder = EventStreamDecoder(1024)
    stream = MESSAGE + MESSAGE
    messages = [m for i in range(len(stream)) for m in decoder.feed(stream[i:i + 1])]
    assert [(m.headers, m.payload) for m in messages] == [(HEADERS, b'{"delta":{"text":"hi"}}')] * 2
    assert decoder.pending == 0


def test_a_message_cut_short_stays_pending() -> None:
    decoder = EventStreamDecoder(1024)
    assert decoder.feed(MESSAGE[:-3]) == []
    assert decoder.pending == len(MESSAGE) - 3


@pytest.mark.parametrize("where", [2, len(MESSAGE) - 1, 20])
def test_a_flipped_byte_is_refused(where: int) -> None:
    broken = bytearray(MESSAGE)
    broken[where] ^= 0x40
    with pytest.raises(EventStreamError, match="checksum"):
        EventStreamDecoder(1024).feed(bytes(broken))


def test_a_message_over_the_limit_is_refused_from_its_prelude() -> None:
    big = encode_message({}, b"x" * 5000)
    with pytest.raises(EventTooLargeError) as caught:
        EventStreamDecoder(4096).feed(big[:12])
    assert caught.value.limit_bytes == 4096


def framed(headers: bytes) -> bytes:
    """A message of raw header bytes and no payload, both checksums right."""
    prelude = struct.pack(">II", 16 + len(headers), len(headers))
    body = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers
    return body + struct.pack(">I", zlib.crc32(body))


def test_a_header_running_past_its_block_is_refused() -> None:
    # A string header declaring 200 bytes in a block of a dozen: CRCs right, content wrong.
    with pytest.raises(EventStreamError, match="runs past"):
        EventStreamDecoder(1024).feed(framed(b"\x01a\x07\x00\xc8abc"))


def test_headers_over_their_byte_limit_are_refused_from_the_prelude() -> None:
    message = framed(b"\x01a\x00" * (MAX_HEADER_BYTES // 3 + 1))
    with pytest.raises(EventStreamError, match=f"over the limit of {MAX_HEADER_BYTES}"):
        EventStreamDecoder(1 << 20).feed(message[:12])


def test_headers_past_the_count_limit_are_not_decoded() -> None:
    # Header number MAX_HEADERS + 1 has no known type: refused for the count, so it was never read.
    headers = b"\x01a\x00" * MAX_HEADERS + b"\x01b\xff" * 10_000
    with pytest.raises(EventStreamError, match=f"more than {MAX_HEADERS} headers"):
        EventStreamDecoder(1 << 20).feed(framed(headers))


def test_a_message_of_as_many_headers_as_the_limit_decodes() -> None:
    names = [f"h{i:02d}" for i in range(MAX_HEADERS)]
    [message] = EventStreamDecoder(1024 * 4).feed(encode_message(dict.fromkeys(names, True), b"{}"))
    assert list(message.headers) == names
