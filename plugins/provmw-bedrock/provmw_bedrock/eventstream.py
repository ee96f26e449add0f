"""The AWS event-stream framing (``application/vnd.amazon.eventstream``): decode and encode.

Each message is a 12-byte prelude (total length, headers length, the prelude's CRC32), its
headers, its payload and the CRC32 of everything before it, all big-endian. ConverseStream
answers in it; the fake provider writes it. The decoder holds at most one message (bounded
by ``max_message_bytes``) plus the chunk that is being read, and refuses a message whose
prelude declares more as soon as the prelude has arrived, before its bytes do. Headers are
bounded too, before any is decoded: their bytes from the prelude (AWS's own framing limit,
128 KiB), their count as they are walked (``MAX_HEADERS``; an answer carries three or four),
so one message of millions of two-byte headers costs a prelude check, not seconds of work.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Callable, Mapping

import attrs

__all__ = ["MAX_HEADERS", "MAX_HEADER_BYTES", "EventMessage", "EventStreamDecoder", "EventStreamError",
           "EventTooLargeError", "HeaderValue", "encode_message"]

HeaderValue = bool | int | bytes | str | uuid.UUID

_PRELUDE = struct.Struct(">III")
_CRC = struct.Struct(">I")
# Prelude, message CRC: a message with no header and no payload is this long.
_EMPTY_MESSAGE_BYTES = _PRELUDE.size + _CRC.size
# The framing's own limit on a message's headers (botocore refuses more too).
MAX_HEADER_BYTES = 128 * 1024
# Bedrock sends :event-type, :content-type and :message-type (an exception one more): room to spare.
MAX_HEADERS = 32


class EventStreamError(ValueError):
    """Bytes that are not an event-stream message: a bad length, checksum or header."""


class EventTooLargeError(EventStreamError):
    """A message longer than the decoder's limit; it is refused before it is read."""

    def __init__(self, message: str, *, limit_bytes: int) -> None:
        super().__init__(message)
        self.limit_bytes = limit_bytes


@attrs.frozen
class EventMessage:
    """One decoded message: its headers (``:event-type``, ``:message-type``...) and payload."""

    headers: Mapping[str, HeaderValue]
    payload: bytes

    def header(self, name: str) -> str | None:
        """A string header's value, or None when absent or not a string."""
        value = self.headers.get(name)
        return value if isinstance(value, str) else None


class EventStreamDecoder:
    """Splits a byte stream into messages, checking both checksums of each."""

    def __init__(self, max_message_bytes: int, *, max_headers: int = MAX_HEADERS,
                 max_header_bytes: int = MAX_HEADER_BYTES) -> None:
        self._limit = max_message_bytes
        self._max_headers = max_headers
        self._max_header_bytes = max_header_bytes
        self._buffer = bytearray()

    @property
    def pending(self) -> int:
        """Bytes of an unfinished message held: at the end of a stream, a message cut short."""
        return len(self._buffer)

    def feed(self, chunk: bytes) -> list[EventMessage]:
        """Take ``chunk`` and return the messages it completed."""
        self._buffer += chunk
        messages: list[EventMessage] = []
        while (message := self._next()) is not None:
            messages.append(message)
        return messages

    def _next(self) -> EventMessage | None:
        if len(self._buffer) < _PRELUDE.size:
            return None
        total, headers_length = self._prelude()
        if len(self._buffer) < total:
            return None
        message = bytes(self._buffer[:total])
        del self._buffer[:total]
        if zlib.crc32(message[:-_CRC.size]) != _CRC.unpack_from(message, total - _CRC.size)[0]:
            raise EventStreamError("event-stream message checksum does not match")
        headers_end = _PRELUDE.size + headers_length
        headers = _headers(message[_PRELUDE.size:headers_end], self._max_headers)
        return EventMessage(headers, message[headers_end:-_CRC.size])

    def _prelude(self) -> tuple[int, int]:
        """The message's total and headers lengths, checked as soon as they arrive, before the bytes they declare."""
        total, headers_length, prelude_crc = _PRELUDE.unpack_from(self._buffer)
        if zlib.crc32(self._buffer[:8]) != prelude_crc:
            raise EventStreamError("event-stream prelude checksum does not match")
        if total > self._limit:
            raise EventTooLargeError(f"an event-stream message declares {total} bytes, over the limit of "
                                     f"{self._limit} bytes ([http] max_event_bytes)", limit_bytes=self._limit)
        if total < _EMPTY_MESSAGE_BYTES or headers_length > total - _EMPTY_MESSAGE_BYTES:
            raise EventStreamError(f"event-stream lengths are inconsistent (total {total}, headers {headers_length})")
        if headers_length > self._max_header_bytes:
            raise EventStreamError(f"an event-stream message declares {headers_length} bytes of headers, over the "
                                   f"limit of {self._max_header_bytes}")
        return total, headers_length


def _fixed(size: int, convert: Callable[[bytes], HeaderValue]) -> Callable[[bytes, int], tuple[HeaderValue, int]]:
    def read(data: bytes, at: int) -> tuple[HeaderValue, int]:
        if at + size > len(data):
            raise EventStreamError("event-stream header value runs past the headers")
        return convert(data[at:at + size]), at + size

    return read


def _sized(convert: Callable[[bytes], HeaderValue]) -> Callable[[bytes, int], tuple[HeaderValue, int]]:
    """A value after its 16-bit length."""
    def read(data: bytes, at: int) -> tuple[HeaderValue, int]:
        length, at = _fixed(2, lambda raw: int.from_bytes(raw, "big"))(data, at)
        assert isinstance(length, int)
        return _fixed(length, convert)(data, at)

    return read


def _signed(data: bytes) -> int:
    return int.from_bytes(data, "big", signed=True)


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise EventStreamError("event-stream string header is not UTF-8") from None


# The header value types the framing defines, by their type byte.
_READERS: Mapping[int, Callable[[bytes, int], tuple[HeaderValue, int]]] = {
    0: lambda data, at: (True, at),
    1: lambda data, at: (False, at),
    2: _fixed(1, _signed),
    3: _fixed(2, _signed),
    4: _fixed(4, _signed),
    5: _fixed(8, _signed),
    6: _sized(bytes),
    7: _sized(_text),
    8: _fixed(8, _signed),  # a timestamp, in milliseconds since the epoch
    9: _fixed(16, lambda raw: uuid.UUID(bytes=raw)),
}


def _headers(data: bytes, max_headers: int) -> dict[str, HeaderValue]:
    headers: dict[str, HeaderValue] = {}
    at = count = 0
    while at < len(data):
        # Counted, not len(headers): a repeated name would not grow the dict but costs a walk all the same.
        count += 1
        if count > max_headers:
            raise EventStreamError(f"an event-stream message carries more than {max_headers} headers")
        length = data[at]
        name, kind = _text(data[at + 1:at + 1 + length]), data[at + 1 + length:at + 2 + length]
        if len(kind) != 1 or kind[0] not in _READERS:
            raise EventStreamError(f"event-stream header {name!r} has no known value type")
        headers[name], at = _READERS[kind[0]](data, at + 2 + length)
    return headers


def _header(name: str, value: HeaderValue) -> bytes:
    encoded = name.encode("utf-8")
    head = bytes([len(encoded)]) + encoded
    if isinstance(value, bool):
        return head + bytes([0 if value else 1])
    if isinstance(value, int):
        return head + b"\x04" + value.to_bytes(4, "big", signed=True)
    if isinstance(value, uuid.UUID):
        return head + b"\x09" + value.bytes
    raw, kind = (value.encode("utf-8"), b"\x07") if isinstance(value, str) else (value, b"\x06")
    return head + kind + struct.pack(">H", len(raw)) + raw


def encode_message(headers: Mapping[str, HeaderValue], payload: bytes) -> bytes:
    """One message in the framing, both checksums included (ints are written as 32-bit integers)."""
    encoded = b"".join(_header(name, value) for name, value in headers.items())
    prelude = struct.pack(">II", _EMPTY_MESSAGE_BYTES + len(encoded) + len(payload), len(encoded))
    body = prelude + _CRC.pack(zlib.crc32(prelude)) + encoded + payload
    return body + _CRC.pack(zlib.crc32(body))
