"""An incremental Server-Sent Events decoder, fed bytes as they arrive."""

from __future__ import annotations

import codecs
import re

import attrs

__all__ = ["SSEDecoder", "SSEEvent"]

_EOL = re.compile(r"\r\n|\r|\n")


@attrs.frozen
class SSEEvent:
    """One dispatched event: its type (``message`` unless named) and its joined data."""

    data: str
    event: str = "message"


class SSEDecoder:
    """Splits a byte stream into events: ``:`` comments skipped, ``data:`` lines joined.

    Lines of any length are held as a list of pieces until their end arrives, so a
    multi-megabyte line costs one join, not one copy per chunk.
    """

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending: list[str] = []
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode ``chunk`` and return the events it completed."""
        decoded = self._text.decode(chunk)
        if "\n" not in decoded and "\r" not in decoded:
            self._pending.append(decoded)
            return []
        text = "".join(self._pending) + decoded
        events: list[SSEEvent] = []
        start = 0
        for match in _EOL.finditer(text):
            if match.group() == "\r" and match.end() == len(text):
                break  # may be the first half of a \r\n split across chunks
            if (event := self._line(text[start:match.start()])) is not None:
                events.append(event)
            start = match.end()
        self._pending = [text[start:]] if start < len(text) else []
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: a held-back final ``\r`` ends its line after all."""
        tail = "".join(self._pending)
        self._pending = []
        if not tail.endswith("\r"):
            return []  # an unterminated line or event at EOF is dropped, as the spec says
        event = self._line(tail[:-1])
        return [event] if event is not None else []

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._data and not self._event:
            return None
        event = SSEEvent(data="\n".join(self._data), event=self._event or "message")
        self._event, self._data = "", []
        return event
