"""Analyzers for the tests of the hook: one that finds a name, one that fails."""

from __future__ import annotations

from provmw_guard import Finding


class NameAnalyzer:
    """Finds "Ada Lovelace", as a named-entity model would find a person."""

    def analyze(self, text: str) -> list[Finding]:
        at = text.find("Ada Lovelace")
        return [] if at < 0 else [Finding(at, at + len("Ada Lovelace"), "person")]


class BrokenAnalyzer:
    def analyze(self, text: str) -> list[Finding]:
        raise RuntimeError("the model is not loaded")


NAMES = NameAnalyzer()
