"""Redaction of who a caller is, for anything a plugin writes out (log lines, trace attributes).

E-mail addresses become ``[email]`` and phone numbers ``[phone]``; calendar dates and ISO
timestamps, which have a phone's digits and separators, are kept. The call-log and
OpenTelemetry plugins pass the caller's tenant and user (and any text they are told to
record) through :func:`redact`, so both show the same value for the same caller.
"""

from __future__ import annotations

import re

__all__ = ["redact"]

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
# International or national numbers: optional +country, 7 to 15 digits with common separators.
_PHONE = r"(?<![\w.])\+?\(?\d(?:[\s().-]{0,2}\d){6,14}(?!\w|\.\d)"
# Calendar dates and ISO timestamps have a phone's digits and separators; tried first, they are kept.
_MONTH, _DAY = r"(?:0[1-9]|1[0-2])", r"(?:0[1-9]|[12]\d|3[01])"
_TIME = r"(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
_DATE = (rf"(?<![\w.])(?:\d{{4}}-{_MONTH}-{_DAY}{_TIME}|\d{{4}}/{_MONTH}/{_DAY}"
         rf"|\d{{1,2}}(?P<sep>[/.])\d{{1,2}}(?P=sep)\d{{4}})(?!\w|\.\d)")
# Both start where no word character or dot precedes, on a digit, "+" or "(": tested once, up front,
# so most positions of an identifier fail at once.
_PHONE_OR_DATE = re.compile(rf"(?<![\w.])(?=[+(\d])(?:(?P<date>{_DATE})|{_PHONE})")


def redact(text: str) -> str:
    """Replace e-mail addresses with ``[email]`` and phone numbers with ``[phone]``; dates stay."""
    if text.isalnum() and not text.isdecimal():
        # One word (an id, a name) with a letter in it: an address needs "@", a date a separator,
        # and a phone would have to be the whole word, all digits. Nothing to replace.
        return text
    # Without "@" there is no address, and the e-mail pattern's cost grows with the square of a long word.
    unmailed = _EMAIL.sub("[email]", text) if "@" in text else text
    return _PHONE_OR_DATE.sub(lambda m: m.group() if m.group("date") else "[phone]", unmailed)
