"""Finding personal data in text: one compiled scan for the built-in kinds, validators only on its candidates.

The scan's pattern begins with a character class (``@``, ``:``, ``+``, ``(``, a digit): every built-in
kind contains one of them, so the regular-expression engine skips every other character in its own
loop and tries the branches only there. Branches whose entity begins before that character (the
local part of an e-mail address, an IPv6 address's first group, an IBAN's country code) are widened
to the left afterwards; validators (Luhn, mod 97, octets, :mod:`ipaddress`) run on candidates only.

A heavier detector (Presidio, a model) plugs in as an :class:`Analyzer`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from provmw_guard.iban import iban_span

__all__ = ["ENTITIES", "Analyzer", "EntityAnalyzer", "Finding", "PatternAnalyzer", "label", "merged"]

ENTITIES = ("email", "phone", "card", "iban", "ip")


class Finding(NamedTuple):
    """Something to redact: ``text[start:end]`` is a value of ``kind`` (the placeholder's label, e.g. ``EMAIL``).
    A named tuple, immutable, and made several times a call: a third of a frozen class's cost."""

    start: int
    end: int
    kind: str


@runtime_checkable
class Analyzer(Protocol):
    """A detector of values to redact; the built-in kinds are one, Presidio can be another."""

    def analyze(self, text: str) -> Iterable[Finding]:
        """Every value found in ``text``, in any order; overlapping findings are merged."""
        ...


_LABEL_JUNK = re.compile(r"[^A-Z0-9]+")


def label(kind: str) -> str:
    """A finding's kind as a placeholder label: upper case, letters, digits and single underscores."""
    cleaned = _LABEL_JUNK.sub("_", kind.upper()).strip("_")[:32]
    return cleaned if cleaned and cleaned[0].isalpha() else f"X_{cleaned}".rstrip("_")


_MONTH, _DAY = r"(?:0[1-9]|1[0-2])", r"(?:0[1-9]|[12]\d|3[01])"
_TIME = r"(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
# The first character is consumed by the class in front: this says it starts a token.
_STARTS = r"(?<![\w.].)"
_END = r"(?!\w|\.\d)"
# Each branch continues after the consumed first character; the group's name is the kind.
_BRANCHES: dict[str, tuple[str, str]] = {
    "email": ("@", r"(?P<email>(?<=@)[A-Za-z0-9][A-Za-z0-9-]{0,62}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}"
                   r"(?![A-Za-z0-9-]))"),
    "ip6": (":", r"(?P<ip6>(?<=:)[0-9A-Fa-f]{0,4}:[0-9A-Fa-f:.]*)"),
    # Dates and timestamps have a phone number's digits and separators: matched first, then kept.
    "date": ("0-9", rf"(?P<date>{_STARTS}(?<=\d)(?:\d{{3}}-{_MONTH}-{_DAY}{_TIME}"
                    rf"|\d{{3}}(?P<ymd>[/.]){_MONTH}(?P=ymd){_DAY}|\d?(?P<sep>[/.])\d{{1,2}}(?P=sep)\d{{4}}){_END})"),
    "ip4": ("0-9", rf"(?P<ip4>{_STARTS}(?<=\d)\d{{0,2}}(?:\.\d{{1,3}}){{3}}{_END})"),
    "iban": ("0-9", r"(?P<iban>(?<=(?<![A-Za-z0-9])[A-Z]{2}\d)\d(?: ?[A-Z0-9]){10,32})"),
    "card": ("0-9", rf"(?P<card>{_STARTS}(?<=\d)(?:[ -]?\d){{12,18}}(?!\w|[.-]?\d))"),
    "phone": ("+(0-9", rf"(?P<phone>{_STARTS}(?:(?<=\+)\(?\d|(?<=\()\d|(?<=\d))(?:[\s().-]{{0,2}}\d){{6,14}}{_END})"),
}
_BRANCHES_OF = {"email": ("email",), "ip": ("ip6", "ip4"), "iban": ("iban",), "card": ("card",),
                "phone": ("date", "phone")}
_PHONE_AT = re.compile(rf"[+(0-9]{_BRANCHES['phone'][1]}")
_LOCAL_PART = re.compile(r"[A-Za-z0-9_%+-][A-Za-z0-9._%+-]{0,63}\Z")
_HEX_GROUP = re.compile(r"[0-9A-Fa-f]{1,4}\Z")
_WORDISH = re.compile(r"[\w:.]")


def _compiled(entities: Iterable[str]) -> re.Pattern[str] | None:
    names = {branch for entity in entities for branch in _BRANCHES_OF[entity]}
    branches = [(first, pattern) for name, (first, pattern) in _BRANCHES.items() if name in names]
    if not branches:
        return None
    first = "".join(sorted({part for part, _ in branches}, key=len))
    return re.compile(rf"[{first}](?:{'|'.join(pattern for _, pattern in branches)})")


class EntityAnalyzer:
    """The built-in kinds: e-mail, phone, payment card (Luhn), IBAN (mod 97), IPv4 and IPv6 addresses."""

    def __init__(self, entities: Iterable[str] = ENTITIES) -> None:
        chosen = tuple(entities)
        unknown = sorted(set(chosen) - set(ENTITIES))
        if unknown:
            raise ValueError(f"unknown entities {', '.join(unknown)}; known: {', '.join(ENTITIES)}")
        self.entities = chosen
        self._scan = _compiled(chosen)

    def analyze(self, text: str) -> list[Finding]:
        """The values in ``text``, in order and never overlapping (one widened to its left over the
        one before, an e-mail address after digits, takes it in)."""
        scan = self._scan
        if scan is None:
            return []
        found: list[Finding] = []
        for match in scan.finditer(text):
            kind = match.lastgroup
            if kind is None or kind == "date":
                continue
            finding = _CHECKS[kind](text, *match.span())
            if finding is None:
                continue
            while found and finding.start < found[-1].end:
                finding = Finding(min(finding.start, found.pop().start), finding.end, finding.kind)
            found.append(finding)
        return found


def _email(text: str, start: int, end: int) -> Finding | None:
    local = _LOCAL_PART.search(text, max(0, start - 64), start)
    return None if local is None else Finding(local.start(), end, "EMAIL")


def _ip6(text: str, start: int, end: int) -> Finding | None:
    group = _HEX_GROUP.search(text, max(0, start - 4), start)
    begin = start if group is None else group.start()
    if (begin and _WORDISH.match(text, begin - 1)) or (end < len(text) and text[end].isalnum()):
        return None
    candidate = text[begin:end]
    for tried in (candidate, candidate.rstrip(".")):
        try:
            ipaddress.IPv6Address(tried)
        except ValueError:
            continue
        return Finding(begin, begin + len(tried), "IP")
    return None


def _ip4(text: str, start: int, end: int) -> Finding | None:
    if max(map(int, text[start:end].split("."))) <= 255:
        return Finding(start, end, "IP")
    return None


def _iban(text: str, start: int, end: int) -> Finding | None:
    span = iban_span(text, start - 2, end)
    return None if span is None else Finding(span[0], span[1], "IBAN")


def _card(text: str, start: int, end: int) -> Finding | None:
    # The longest candidate ending where a group ends whose digits pass Luhn; else it may be a phone.
    for stop in _group_ends(text, start, end):
        digits = text[start:stop].translate(_SEPARATORS)
        if 13 <= len(digits) <= 19 and luhn(digits):
            return Finding(start, stop, "CARD")
    phone = _PHONE_AT.match(text, start)  # the whole number, or nothing: never a phone number cut from a longer one
    return None if phone is None or phone.end() < end else Finding(start, end, "PHONE")


_SEPARATORS = str.maketrans("", "", " -")


def _group_ends(text: str, start: int, end: int) -> Iterator[int]:
    yield end
    for at in range(end - 1, start, -1):
        if text[at] in " -":
            yield at


def _phone(text: str, start: int, end: int) -> Finding | None:
    return Finding(start, end, "PHONE")


_CHECKS: dict[str, Callable[[str, int, int], Finding | None]] = {
    "email": _email, "ip6": _ip6, "ip4": _ip4, "iban": _iban, "card": _card, "phone": _phone,
}


def luhn(digits: str) -> bool:
    """Whether a string of digits passes the Luhn check payment card numbers carry."""
    kept = sum(map(int, digits[-1::-2]))
    return (kept + sum(map(_DOUBLED.__getitem__, digits[-2::-2]))) % 10 == 0


_DOUBLED = {str(d): d * 2 - 9 if d > 4 else d * 2 for d in range(10)}


class PatternAnalyzer:
    """Custom kinds from settings: each a label and a regular expression; the whole match is redacted."""

    def __init__(self, patterns: Sequence[tuple[str, re.Pattern[str]]]) -> None:
        self.patterns = tuple((label(kind), pattern) for kind, pattern in patterns)

    def analyze(self, text: str) -> list[Finding]:
        return [Finding(m.start(), m.end(), kind) for kind, pattern in self.patterns
                for m in pattern.finditer(text) if m.end() > m.start()]


def merged(findings: Iterable[Finding], length: int) -> list[Finding]:
    """Findings in order, overlapping ones joined into one (the first one's kind), bounds checked:
    a span an analyzer got wrong is a ``ValueError``, never a value left half in place."""
    given = findings if isinstance(findings, list) else list(findings)
    if _in_order(given, length):  # the built-in analyzer's findings mostly are: nothing to sort or join
        return given
    out: list[Finding] = []
    for finding in sorted(given, key=lambda f: (f.start, -f.end)):
        if not 0 <= finding.start < finding.end <= length:
            raise ValueError(f"a finding of kind {finding.kind!r} lies outside the text")
        if out and finding.start < out[-1].end:
            last = out[-1]
            if finding.end > last.end:
                out[-1] = Finding(last.start, finding.end, last.kind)
            continue
        out.append(finding)
    return out


def _in_order(findings: list[Finding], length: int) -> bool:
    end = 0
    for finding in findings:
        if finding.start < end or finding.end <= finding.start:
            return False
        end = finding.end
    return end <= length
