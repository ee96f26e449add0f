"""Redaction of e-mail addresses and phone numbers in text bound for logs."""

from __future__ import annotations

import re

__all__ = ["redact"]

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
# International or national numbers: optional +country, 7 to 15 digits with common separators.
_PHONE = re.compile(r"(?<![\w.])\+?\(?\d(?:[\s().-]{0,2}\d){6,14}(?!\w|\.\d)")


def redact(text: str) -> str:
    """Replace e-mail addresses with ``[email]`` and phone numbers with ``[phone]``."""
    return _PHONE.sub("[phone]", _EMAIL.sub("[email]", text))
