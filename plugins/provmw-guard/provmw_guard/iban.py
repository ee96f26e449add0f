"""IBANs: each country's length (the SWIFT registry) and the mod-97 check, on a candidate the scan found."""

from __future__ import annotations

import functools
import re

__all__ = ["IBAN_LENGTHS", "iban_span", "mod97"]

IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29,
    "RO": 24, "RS": 22, "SA": 24, "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}


def mod97(compact: str) -> bool:
    """Whether an IBAN without spaces passes its check: the first four characters moved to the end,
    letters as numbers (A is 10), the whole is 1 modulo 97."""
    return int((compact[4:] + compact[:4]).translate(_AS_NUMBERS)) % 97 == 1


_AS_NUMBERS = {ord(letter): str(value) for value, letter in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 10)}


def iban_span(text: str, begin: int, end: int) -> tuple[int, int] | None:
    """The span of the IBAN starting at ``begin`` (its country code) within ``text[begin:end]``: as
    many characters as its country's IBANs have, spaces between them allowed, ending at a token's
    end and passing mod 97; None when there is none."""
    length = IBAN_LENGTHS.get(text[begin:begin + 2])
    if length is None:
        return None
    found = _shape(length).match(text, begin, end)
    if found is None or (found.end() < len(text) and text[found.end()].isalnum()):
        return None
    return (begin, found.end()) if mod97(found.group().replace(" ", "")) else None


@functools.cache
def _shape(length: int) -> re.Pattern[str]:
    """An IBAN of ``length``: country code, check digits and the rest, single spaces allowed between
    characters; compiled when first needed, so that importing the guard compiles none."""
    return re.compile(rf"[A-Z]{{2}}\d(?: ?[A-Z0-9]){{{length - 3}}}")
