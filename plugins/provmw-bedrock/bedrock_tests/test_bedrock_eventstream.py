"""The event-stream codec: what the fake encodes, botocore decodes, and so does the adapter's decoder."""

from __future__ import annotations

import struct
import zlib

import pytest
from botocore.eventstream import EventStreamBuffer
from provmw_bedrock.eventstream import (
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


def test_a_header_running_past_its_block_is_refused() -> None:
    # A string header declaring 200 bytes in a block of a dozen: CRCs right, content wrong.
    headers = b"\x01a\x07\x00\xc8abc"
    prelude = struct.pack(">II", 16 + len(headers), len(headers))
    body = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers
    with pytest.raises(EventStreamError, match="runs past"):
        EventStreamDecoder(1024).feed(body + struct.pack(">I", zlib.crc32(body)))
