"""The key format: every key made parses to its id, and nothing else does (ADR 0055)."""

from __future__ import annotations

import hashlib
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.errors import ConfigurationError
from provmw.gateway.keys import KEY_LENGTH, KeyRecord, key_digest, key_id_of, new_key

_ALPHABET = string.ascii_letters + string.digits + "_-"


def test_a_new_key_parses_to_its_id() -> None:
    for _ in range(200):  # the secret's alphabet holds '_' and '-': the id is still found by position
        key_id, whole = new_key()
        assert (len(whole), key_id_of(whole)) == (KEY_LENGTH, key_id)


def test_two_new_keys_differ_in_id_and_secret() -> None:
    (one_id, one), (two_id, two) = new_key(), new_key()
    assert one_id != two_id
    assert one.split("_", 2)[2] != two.split("_", 2)[2]


@given(st.text(alphabet=_ALPHABET + "é =", max_size=80))
def test_a_string_parses_only_when_it_has_the_keys_shape(text: str) -> None:
    shaped = len(text) == KEY_LENGTH and text.startswith("pmk_") and text[16] == "_" and \
        all(c in "0123456789abcdef" for c in text[4:16]) and all(c in _ALPHABET for c in text[17:])
    assert (key_id_of(text) is not None) == shaped


@given(st.text(alphabet=_ALPHABET, min_size=43, max_size=43))
def test_any_secret_of_the_alphabet_parses(secret: str) -> None:
    assert key_id_of(f"pmk_0123456789ab_{secret}") == "0123456789ab"


def test_the_digest_is_the_whole_keys_sha256_in_hex() -> None:
    whole = "pmk_0123456789ab_" + "A" * 43
    assert key_digest(whole) == hashlib.sha256(whole.encode()).hexdigest()


@pytest.mark.parametrize("fields", [{"key_id": "0123456789AB"}, {"key_id": "0123"}, {"organisation": " "},
                                    {"team": ""}, {"models": ["ok", ""]}])
def test_a_record_with_a_bad_field_is_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        KeyRecord(**{"key_id": "0123456789ab", "organisation": "acme", **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(("field", "value"), [("organisation", "a/b"), ("team", "b/c"), ("organisation", "ac\nme"),
                                               ("team", "t\x00"), ("user", "\ud800"), ("user", "u" * 129),
                                               ("organisation", "o" * 129)])
def test_a_name_with_a_slash_a_control_character_or_too_long_is_refused_naming_its_field(field: str,
                                                                                         value: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^{field}: "):
        KeyRecord(**{"key_id": "0123456789ab", "organisation": "acme", field: value})  # type: ignore[arg-type]


def test_a_user_may_hold_a_slash_and_names_may_hold_spaces_and_any_script() -> None:
    record = KeyRecord(key_id="0123456789ab", organisation="Acme Société", team="équipe ü", user="ada/ops")
    assert (record.organisation, record.user) == ("Acme Société", "ada/ops")


def test_a_single_model_name_is_one_name_not_its_letters() -> None:
    assert KeyRecord(key_id="0123456789ab", organisation="acme", models="gpt").models == ("gpt",)
