"""Restoring placeholders in a stream: a placeholder may arrive split across chunks.

The restorer holds back only the end of the text that can still grow into a placeholder (an
opening bracket and what may follow it, at most ``MAX_PLACEHOLDER_CHARS`` characters), hands on
everything before it restored, and releases what it holds with the provider's last chunk or at
the stream's end. A chunk without ``<`` (and without a backslash, in JSON) passes as it came.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import attrs

from provmw.responses import ChatChunk
from provmw_guard.placeholders import MAX_PLACEHOLDER_CHARS, Redaction

__all__ = ["OutputWatch", "StreamRestorer"]

# What can still become a placeholder at the end of the text: an opening and the start of a label
# and number; in JSON, the brackets may be escapes, themselves cut anywhere.
_TEXT_TAIL = re.compile(r"<[A-Z0-9_]*\Z")
_JSON_TAIL = re.compile(r"(?:<|\\u003[cC])[A-Z0-9_]*(?:\\(?:u(?:0(?:0(?:3[eE]?)?)?)?)?)?\Z"
                        r"|\\(?:u(?:0(?:0(?:3)?)?)?)?\Z")

OutputWatch = Callable[[str], None]


class StreamRestorer:
    """A chunk filter restoring one call's placeholders in streamed text and tool calls.

    ``json`` is for answers that are JSON (a response schema): values are restored escaped.
    ``watch`` sees each piece of restored text handed on (output policies); it may raise.
    """

    def __init__(self, redaction: Redaction, *, json: bool = False, watch: OutputWatch | None = None) -> None:
        self._redaction = redaction
        self._json = json
        self._restore = redaction.restore_json if json else redaction.restore
        self._tail = _JSON_TAIL if json else _TEXT_TAIL
        self._watch = watch
        self._held = ""
        self._last: ChatChunk | None = None

    def chunk(self, chunk: ChatChunk) -> Sequence[ChatChunk]:
        self._last = chunk
        text = self._held + chunk.text if self._held else chunk.text
        if chunk.finish_reason is not None:
            self._held = ""
            return (self._restored(chunk, text),)
        if "<" not in text and (not self._json or "\\" not in text):
            self._held = ""
            if not chunk.tool_calls:
                if self._watch is not None:
                    self._watch(text)
                return (chunk,) if text is chunk.text else (attrs.evolve(chunk, text=text),)
            return (self._restored(chunk, text),)
        tail = self._tail.search(text, max(0, len(text) - MAX_PLACEHOLDER_CHARS))
        cut = len(text) if tail is None else tail.start()
        self._held = text[cut:]
        if cut == 0 and not chunk.tool_calls and chunk.usage is None:
            return ()
        return (self._restored(chunk, text[:cut]),)

    def end(self) -> Sequence[ChatChunk]:
        """What is still held when the stream ends without a last chunk releasing it."""
        held, self._held = self._held, ""
        if not held or self._last is None:
            return ()
        return (self._restored(ChatChunk(served_by=self._last.served_by, attempts=self._last.attempts), held),)

    def _restored(self, chunk: ChatChunk, text: str) -> ChatChunk:
        restored = self._restore(text)
        if self._watch is not None:
            self._watch(restored)
        redaction = self._redaction
        calls = tuple(attrs.evolve(c, arguments=redaction.restore_json(c.arguments)) for c in chunk.tool_calls)
        if self._watch is not None:
            for call in calls:
                self._watch(call.arguments)
        parsed = redaction.restore_value(chunk.parsed) if chunk.parsed is not None else None
        return attrs.evolve(chunk, text=restored, tool_calls=calls, parsed=parsed)
