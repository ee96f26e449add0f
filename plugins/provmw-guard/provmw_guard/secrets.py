"""Secrets in prompts: provider keys, cloud and code-host tokens, JWTs, private keys, bearer tokens.

Each kind has a literal marker; text holding none of them is passed by with a few substring tests
(done in C), and only text that holds one is scanned. A finding's kind is its rule's name
(``openai_key``, ``aws_access_key_id``...), so a refusal can name it without the value.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["SECRET_RULES", "SecretFinding", "SecretScanner"]

_TOKEN = r"(?<![A-Za-z0-9_-])"
SECRET_RULES: dict[str, str] = {
    "anthropic_key": rf"{_TOKEN}sk-ant-[A-Za-z0-9_-]{{20,}}",
    "openai_key": rf"{_TOKEN}sk-[A-Za-z0-9_-]{{20,}}",
    "aws_access_key_id": r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Za-z])",
    "google_api_key": rf"{_TOKEN}AIza[0-9A-Za-z_-]{{35}}",
    "github_token": rf"{_TOKEN}(?:gh[pousr]_[A-Za-z0-9]{{36,255}}|github_pat_[A-Za-z0-9_]{{22,255}})",
    "slack_token": rf"{_TOKEN}xox[abposr]-[A-Za-z0-9-]{{10,}}",
    "jwt": rf"{_TOKEN}eyJ[A-Za-z0-9_-]{{5,}}\.eyJ[A-Za-z0-9_-]{{5,}}\.[A-Za-z0-9_-]*",
    # To its END line, or to the end of the text when it was cut: never half a key left in place.
    "private_key": r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY-----|.*\Z)",
    "bearer_token": r"(?<![A-Za-z])(?:[Bb]earer|BEARER)[ \t]+(?P<bearer>[A-Za-z0-9._~+/-]{16,}=*)",
}


def _may_hold(text: str) -> bool:
    """Whether ``text`` holds a marker every secret's match contains; a single character first, which
    is found fastest ("_" stands for GitHub's prefixes: "gh" is in many words)."""
    return ("-" in text and ("sk-" in text or "xox" in text or "-----BEGIN" in text)) \
        or ("A" in text and ("AKIA" in text or "ASIA" in text or "AIza" in text)) \
        or "_" in text or ("J" in text and "eyJ" in text) or "earer" in text or "EARER" in text


# Provider keys are random: a hyphenated phrase ("sk-learn-compatible-...") has no digit.
_RANDOM = ("anthropic_key", "openai_key", "slack_token")


class SecretFinding(NamedTuple):
    """A secret at ``text[start:end]``, found by the rule ``rule``."""

    start: int
    end: int
    rule: str


class SecretScanner:
    """Finds secrets; one compiled pattern, run only on text that holds a marker."""

    def __init__(self) -> None:
        self._scan = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in SECRET_RULES.items()),
                                re.DOTALL)

    def find(self, text: str) -> list[SecretFinding]:
        if not _may_hold(text):
            return []
        return [found for match in self._scan.finditer(text) if (found := _finding(match)) is not None]


def _finding(match: re.Match[str]) -> SecretFinding | None:
    rule = match.lastgroup
    if rule is None:
        return None
    if rule == "bearer_token":
        return SecretFinding(match.start("bearer"), match.end("bearer"), rule)
    if rule in _RANDOM and not any(c.isdigit() for c in match.group()):
        return None
    return SecretFinding(match.start(), match.end(), rule)
