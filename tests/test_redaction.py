"""What redaction keeps: identifiers and names pass through untouched (and cheaply, since every
traced call redacts its correlation id), while a phone number is replaced even standing alone."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from provmw.redaction import redact


@given(st.uuids())
def test_a_correlation_id_is_kept(value: uuid.UUID) -> None:
    assert redact(value.hex) == value.hex


@given(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]*\d{7,15}", fullmatch=True))
def test_a_word_ending_in_a_phones_digits_is_kept(word: str) -> None:
    assert redact(word) == word


def test_a_phone_number_alone_or_in_words_is_replaced() -> None:
    assert [redact(text) for text in ("4155550100", "+14155550100", "call 4155550100.")] == [
        "[phone]", "[phone]", "call [phone]."]


def test_an_address_inside_a_word_list_is_replaced() -> None:
    assert redact("ada@example.com,bob") == "[email],bob"
