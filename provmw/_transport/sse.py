"""An incremental Server-Sent Events decoder, fed bytes as they arrive, with a size limit."""

from __future__ import annotations

import re

import attrs

from provmw._transport.reads import ReadLimits, ReadRefused

__all__ = ["SSEDecoder", "SSEEvent"]

# Lines are split on the bytes: in UTF-8 a CR or LF byte is never part of another character,
# so each line can be decoded alone and its size counted in bytes as received.
_EOL = re.compile(rb"\r\n|\r|\n")


@attrs.frozen
class SSEEvent:
    """One dispatched event: its type (``message`` unless named) and its joined data."""

    data: str
    event: str = "message"


class SSEDecoder:
    """Splits a byte stream into events: ``:`` comments skipped, ``data:`` lines joined.

    An unfinished line is held as a list of pieces until its end arrives, so a long line
    costs one join, not one copy per chunk. A line, or the data of one event, longer than
    ``max_event_bytes`` raises ``ReadRefused`` as soon as the limit is passed.
    """

    def __init__(self, max_event_bytes: int = ReadLimits().max_event_bytes) -> None:
        self._limit = max_event_bytes
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._event = ""
        self._data: list[str] = []
        self._data_bytes = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Take ``chunk`` and return the events it completed."""
        if b"\n" not in chunk and b"\r" not in chunk:
            self._hold(chunk)
            return []
        text = b"".join((*self._pending, chunk)) if self._pending else chunk
        events: list[SSEEvent] = []
        start = 0
        for match in _EOL.finditer(text):
            if match.group() == b"\r" and match.end() == len(text):
                break  # may be the first half of a \r\n split across chunks
            if (event := self._line(text[start:match.start()])) is not None:
                events.append(event)
            start = match.end()
        self._pending, self._pending_bytes = [], 0
        self._hold(text[start:])
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: a held-back final ``\r`` ends its line after all."""
        tail = b"".join(self._pending)
        self._pending, self._pending_bytes = [], 0
        if not tail.endswith(b"\r"):
            return []  # an unterminated line or event at EOF is dropped, as the spec says
        event = self._line(tail[:-1])
        return [event] if event is not None else []

    def _hold(self, piece: bytes) -> None:
        if piece:
            self._pending.append(piece)
            self._pending_bytes += len(piece)
            self._check(self._pending_bytes, "an SSE line")

    def _check(self, size: int, what: str) -> None:
        if size > self._limit:
            raise ReadRefused(f"{what} is longer than the limit of {self._limit} bytes ([http] max_event_bytes)",
                              limit_bytes=self._limit)

    def _line(self, raw: bytes) -> SSEEvent | None:
        self._check(len(raw), "an SSE line")
        if not raw:
            return self._dispatch()
        if raw.startswith(b":"):
            return None
        field, _, value = raw.decode("utf-8", errors="replace").partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._data_bytes += len(raw)
            self._check(self._data_bytes, "an SSE event's data")
            self._data.append(value)
        elif field == "event":
            self._event = value
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._data and not self._event:
            return None
        event = SSEEvent(data="\n".join(self._data), event=self._event or "message")
        self._event, self._data, self._data_bytes = "", [], 0
        return event
