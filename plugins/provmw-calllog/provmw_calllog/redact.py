"""Redaction and escaping of text bound for logs: e-mail addresses and phone numbers are replaced,
control characters escaped, so that neither a caller's identity nor a forged line reaches the log."""

from __future__ import annotations

import re

__all__ = ["escape", "field", "redact"]

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
# International or national numbers: optional +country, 7 to 15 digits with common separators.
_PHONE = r"(?<![\w.])\+?\(?\d(?:[\s().-]{0,2}\d){6,14}(?!\w|\.\d)"
# Calendar dates and ISO timestamps have a phone's digits and separators; tried first, they are kept.
_MONTH, _DAY = r"(?:0[1-9]|1[0-2])", r"(?:0[1-9]|[12]\d|3[01])"
_TIME = r"(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
_DATE = (rf"(?<![\w.])(?:\d{{4}}-{_MONTH}-{_DAY}{_TIME}|\d{{4}}/{_MONTH}/{_DAY}"
         rf"|\d{{1,2}}(?P<sep>[/.])\d{{1,2}}(?P=sep)\d{{4}})(?!\w|\.\d)")
_PHONE_OR_DATE = re.compile(rf"(?P<date>{_DATE})|{_PHONE}")
_QUOTE_IF = re.compile(r'[ "=]')


def redact(text: str) -> str:
    """Replace e-mail addresses with ``[email]`` and phone numbers with ``[phone]``; dates stay."""
    return _PHONE_OR_DATE.sub(lambda m: m.group() if m.group("date") else "[phone]", _EMAIL.sub("[email]", text))


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
