"""The built-in kinds: found where they are, validated, and ordinary text left alone."""

from __future__ import annotations

import pytest
from provmw_guard import EntityAnalyzer, Finding
from provmw_guard.detect import luhn, merged

ANALYZER = EntityAnalyzer()


def found(text: str) -> list[tuple[str, str]]:
    return [(f.kind, text[f.start:f.end]) for f in ANALYZER.analyze(text)]


@pytest.mark.parametrize(("text", "kind", "value"), [
    ("mail ada.lovelace+news@mail.example.co.uk.", "EMAIL", "ada.lovelace+news@mail.example.co.uk"),
    ("call +44 20 7946 0958 now", "PHONE", "+44 20 7946 0958"),
    ("call (415) 555-0100.", "PHONE", "(415) 555-0100"),
    ("card 4111 1111 1111 1111 exp 12/27", "CARD", "4111 1111 1111 1111"),
    ("card 5500-0000-0000-0004", "CARD", "5500-0000-0000-0004"),
    ("pay GB82 WEST 1234 5698 7654 32 today", "IBAN", "GB82 WEST 1234 5698 7654 32"),
    ("pay DE89370400440532013000.", "IBAN", "DE89370400440532013000"),
    ("from 192.168.1.20, again", "IP", "192.168.1.20"),
    ("from 2001:db8::8a2e:370:7334 and", "IP", "2001:db8::8a2e:370:7334"),
    ("loopback ::1 only", "IP", "::1"),
    ("mapped ::ffff:10.0.0.1 here", "IP", "::ffff:10.0.0.1"),
])
def test_each_kind_is_found(text: str, kind: str, value: str) -> None:
    assert found(text) == [(kind, value)]


@pytest.mark.parametrize("text", [
    "version 3.11 and 42 items", "due 2026-11-23, or 23/11/2026, at 2026-11-23T10:15:00Z, 2026.11.23",
    "a card-like 4111 1111 1111 1112 fails Luhn", "GB83 WEST 1234 5698 7654 32 fails mod 97",
    "ZZ82 WEST 1234 5698 7654 32 has no such country", "999.168.1.20 is no address",
    "at 10:30:45, Note: a MAC 00:1A:2B:3C:4D:5E", "an @mention and a@b", "price: $1,299.00",
])
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert found(text) == []


def test_a_card_failing_luhn_may_still_be_a_phone_number() -> None:
    assert found("call 4155550100123") == [("PHONE", "4155550100123")]


def test_only_the_chosen_entities_are_found() -> None:
    text = "ada@example.com from 10.0.0.1"
    assert [f.kind for f in EntityAnalyzer(["ip"]).analyze(text)] == ["IP"]


def test_an_unknown_entity_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown entities passport"):
        EntityAnalyzer(["email", "passport"])


def test_luhn() -> None:
    assert luhn("4111111111111111") and not luhn("4111111111111112")


def test_overlapping_findings_become_one() -> None:
    findings = [Finding(0, 5, "A"), Finding(3, 9, "B"), Finding(12, 14, "C")]
    assert merged(findings, 20) == [Finding(0, 9, "A"), Finding(12, 14, "C")]


def test_a_finding_outside_the_text_is_an_error() -> None:
    with pytest.raises(ValueError, match="outside the text"):
        merged([Finding(3, 30, "A")], 10)
