"""Policies on a call's text: deny patterns and size limits, each refusal named by its rule.

What a policy finds is named, never shown: a refusal and a log line carry the rule's name
(``deny:no-ssn``, ``size:input``, ``secret:aws_access_key_id``), never the text that matched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from provmw_guard.options import DenyRule

__all__ = ["DenyRules", "OutputWindow", "size_refusal"]

# A deny pattern is searched across stream chunks in the last this-many characters and the new text.
_STREAM_OVERLAP_CHARS = 256


class DenyRules:
    """The deny patterns of one stage, compiled once."""

    def __init__(self, rules: Iterable[DenyRule], stage: str) -> None:
        self.rules = tuple((f"deny:{r.rule}", re.compile(r.regex)) for r in rules if r.stage in (stage, "both"))

    def refusals(self, texts: Sequence[str]) -> list[str]:
        """The rules that match any of ``texts``, in their order."""
        return [rule for rule, pattern in self.rules if any(pattern.search(text) for text in texts)]


def size_refusal(texts: Sequence[str], limit: int | None, stage: str) -> str | None:
    """``size:<stage>`` when the texts hold more characters than ``limit`` together."""
    if limit is None or sum(map(len, texts)) <= limit:
        return None
    return f"size:{stage}"


class OutputWindow:
    """Output policies over a stream: the characters so far, and the deny patterns across chunk edges."""

    def __init__(self, deny: DenyRules, limit: int | None) -> None:
        self._deny, self._limit = deny, limit
        self._seen, self._tail = 0, ""

    def refusals(self, text: str) -> list[str]:
        """The rules the stream breaks with ``text`` added to what it already said."""
        self._seen += len(text)
        refused = [] if self._limit is None or self._seen <= self._limit else ["size:output"]
        if self._deny.rules and text:
            window = self._tail + text
            refused += self._deny.refusals([window])
            self._tail = window[-_STREAM_OVERLAP_CHARS:]
        return refused
