"""Scrubbing, pinned where the mutation run found it unchecked (docs/testing.md)."""

from __future__ import annotations

from provmw.scrubbing import Scrubber, url_secrets


def test_a_secret_cut_short_at_the_end_is_masked_from_its_longest_start_and_no_earlier() -> None:
    # The text's last eight "a" do not start the secret (its eighth character is "Z"); its last seven do.
    assert Scrubber.of(["aaaaaaaZ1234"]).text("body: aaaaaaaa") == "body: a***"


def test_an_unpadded_url_safe_base64_secret_ending_in_x_is_masked_whole() -> None:
    # ">>>>>W" is "Pj4+Pj5X" in standard base64 and "Pj4-Pj5X" in the URL-safe alphabet: no padding to drop.
    assert Scrubber.of([">>>>>W"]).text("got Pj4-Pj5X back") == "got *** back"


def test_a_urls_password_is_found_as_written_and_decoded_with_its_user_part() -> None:
    assert url_secrets("https://ada:s%2Fcret@h.example/v1") == ("ada:s%2Fcret", "s%2Fcret", "s/cret")


def test_a_password_holding_an_at_sign_is_found_whole() -> None:
    assert url_secrets("https://ada:p@ss@h.example/v1")[1] == "p@ss"


def test_a_password_holding_a_colon_is_found_whole() -> None:
    assert url_secrets("https://ada:pa:ss@h.example/v1")[1] == "pa:ss"


def test_a_query_value_is_a_secret_when_its_name_is_key_like_whatever_the_value() -> None:
    assert url_secrets("https://h.example/v1?api_key=short1") == ("short1", "short1")
