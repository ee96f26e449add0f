"""One call's placeholders: values out, ``<EMAIL_1>`` in, and back.

A placeholder is ``<`` + label + ``_`` + number + ``>``: models copy such tokens faithfully (angle
brackets around an upper-case name), and the numbers this call hands out skip every
placeholder-shaped string already in the call's text, so a ``<EMAIL_1>`` the caller wrote
is never mistaken for one of ours and comes back unchanged. Only placeholders this call
issued are restored; any other is left as the model wrote it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from json.encoder import encode_basestring
from typing import Any

from provmw_guard.detect import Finding

__all__ = ["MAX_PLACEHOLDER_CHARS", "PLACEHOLDER", "Redaction", "reserved_names"]

PLACEHOLDER = re.compile(r"<([A-Z][A-Z0-9_]*_[0-9]+)>")
# In JSON a model (or its encoder) may write the brackets as \u003c and \u003e.
_JSON_PLACEHOLDER = re.compile(r"(?:<|\\u003[cC])([A-Z][A-Z0-9_]*_[0-9]+)(?:>|\\u003[eE])")
# The longest placeholder: a label of 32 characters, a number of up to 9 digits, brackets escaped in JSON.
MAX_PLACEHOLDER_CHARS = 6 + 32 + 1 + 9 + 6
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NUMBER_CHARS = frozenset("0123456789.eE+-")

Find = Callable[[str], list[Finding]]


def reserved_names(texts: Iterable[str]) -> set[str]:
    """The placeholder names already written in ``texts``: never handed out, never restored."""
    return {m.group(1) for text in texts if "<" in text or "\\u003" in text
            for m in _JSON_PLACEHOLDER.finditer(text)}


class Redaction:
    """The placeholders of one call: the same value gets the same placeholder everywhere in it."""

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._tokens: dict[str, str] = {}
        self.values: dict[str, str] = {}
        self._numbers: dict[str, int] = {}
        self._reserved = set(reserved)
        self.counts: dict[str, int] = {}

    def placeholder(self, value: str, kind: str) -> str:
        """The placeholder standing for ``value`` in this call (a new one the first time)."""
        token = self._tokens.get(value)
        if token is None:
            token = self._issue(value, kind)
        counts = self.counts
        counts[kind] = counts.get(kind, 0) + 1
        return token

    def _issue(self, value: str, kind: str) -> str:
        number = self._numbers.get(kind, 0) + 1
        while f"{kind}_{number}" in self._reserved:
            number += 1
        self._numbers[kind] = number
        self.values[f"{kind}_{number}"] = value
        token = self._tokens[value] = f"<{kind}_{number}>"
        return token

    def redact(self, text: str, findings: list[Finding]) -> str:
        """``text`` with each finding (in order, not overlapping) replaced by its placeholder."""
        if not findings:
            return text
        pieces: list[str] = []
        at = 0
        for finding in findings:
            pieces += (text[at:finding.start], self.placeholder(text[finding.start:finding.end], finding.kind))
            at = finding.end
        pieces.append(text[at:])
        return "".join(pieces)

    def redact_json(self, text: str, find: Find) -> str:
        """JSON text (a tool call's arguments) with its values redacted, still valid JSON: a string
        keeps its escapes; a number holding a value becomes a string holding its placeholder."""
        try:
            json.loads(text)
        except ValueError:
            return self.redact(text, find(text))
        pieces: list[str] = []
        at = 0
        for token in _JSON_STRING.finditer(text):
            pieces += (self._redact_gap(text[at:token.start()], find), self._redact_string(token.group(), find))
            at = token.end()
        pieces.append(self._redact_gap(text[at:], find))
        return "".join(pieces)

    def _redact_string(self, token: str, find: Find) -> str:
        if "\\" not in token:
            inner = token[1:-1]
            return f'"{self.redact(inner, find(inner))}"'
        decoded = json.loads(token)
        findings = find(decoded)
        return encode_basestring(self.redact(decoded, findings)) if findings else token

    def _redact_gap(self, gap: str, find: Find) -> str:
        findings = find(gap)
        if not findings:
            return gap
        pieces: list[str] = []
        at = 0
        for finding in findings:  # the whole number, quoted: a placeholder is not a JSON number
            start, end = finding.start, finding.end
            while start > at and gap[start - 1] in _NUMBER_CHARS:
                start -= 1
            while end < len(gap) and gap[end] in _NUMBER_CHARS:
                end += 1
            pieces += (gap[at:start], f'"{self.placeholder(gap[start:end], finding.kind)}"')
            at = end
        pieces.append(gap[at:])
        return "".join(pieces)

    def restore(self, text: str) -> str:
        """``text`` with this call's placeholders replaced by their values."""
        if "<" not in text or not self.values:
            return text
        values = self.values
        return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group()), text)

    def restore_json(self, text: str) -> str:
        """JSON text with this call's placeholders restored, each value escaped as a JSON string's content."""
        if not self.values or ("<" not in text and "\\u003" not in text):
            return text
        values = self.values

        def value(match: re.Match[str]) -> str:
            found = values.get(match.group(1))
            return match.group() if found is None else encode_basestring(found)[1:-1]

        return _JSON_PLACEHOLDER.sub(value, text)

    def restore_value(self, value: Any) -> Any:
        """A parsed JSON value with this call's placeholders restored in every string, keys included."""
        if isinstance(value, str):
            return self.restore(value)
        if isinstance(value, Mapping):
            return {self.restore(str(k)): self.restore_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.restore_value(v) for v in value]
        return value
