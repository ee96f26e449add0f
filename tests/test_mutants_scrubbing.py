"""Scrubbing, pinned where the mutation run found it unchecked (docs/testing.md)."""

from __future__ import annotations

from provmw.scrubbing import Scrubber


def test_a_secret_cut_short_at_the_end_is_masked_from_its_longest_start_and_no_earlier() -> None:
    # The text's last eight "a" do not start the secret (its eighth character is "Z"); its last seven do.
    assert Scrubber.of(["aaaaaaaZ1234"]).text("body: aaaaaaaa") == "body: a***"


def test_an_unpadded_url_safe_base64_secret_ending_in_x_is_masked_whole() -> None:
    # ">>>>>W" is "Pj4+Pj5X" in standard base64 and "Pj4-Pj5X" in the URL-safe alphabet: no padding to drop.
    assert Scrubber.of([">>>>>W"]).text("got Pj4-Pj5X back") == "got *** back"
