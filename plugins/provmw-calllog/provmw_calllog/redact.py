"""Redaction and escaping of text bound for logs: e-mail addresses and phone numbers are replaced
(by :func:`provmw.redaction.redact`, shared with other plugins), control characters escaped, so that
neither a caller's identity nor a forged line reaches the log."""

from __future__ import annotations

import re

from provmw.redaction import redact

__all__ = ["escape", "field", "redact"]

_QUOTE_IF = re.compile(r'[ "=]')


def escape(text: str) -> str:
    """``text`` as one token of a log line: backslashes and every character ``str.isprintable``
    rejects escaped (``\\n`` becomes ``\\x0a``; so are line separators, bidi overrides and
    zero-width characters, which can make one line read as another), quoted when it holds a
    space, a quote or ``=`` (or is empty)."""
    text = text.replace("\\", "\\\\")
    safe = text if text.isprintable() else "".join(c if c.isprintable() else _escaped(c) for c in text)
    return '"' + safe.replace('"', '\\"') + '"' if not safe or _QUOTE_IF.search(safe) else safe


def field(value: object) -> str:
    """A caller-chosen value (user, tenant) for a log line: redacted, then escaped; ``-`` for none."""
    return "-" if value is None else escape(redact(str(value)))


def _escaped(character: str) -> str:
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
