"""Every form a secret comes back in is masked (URL-encoded, base64 padded or not, in bytes, in headers),
the longest first; URLs are shown without their credentials."""

from __future__ import annotations

import pytest

from provmw._redact import Scrubber, masked_url
from provmw.config import ProviderConfig


@pytest.mark.parametrize(("secret", "sent"), [
    ("pass word/1", "pass%20word%2F1"),  # URL-encoded with nothing left safe
    ("abcd1", "YWJjZDE"),  # base64 with its padding dropped
    (">>>?", "Pj4-Pw"),  # URL-safe base64, unpadded
])
def test_an_encoded_secret_is_masked_in_the_middle_of_a_text(secret: str, sent: str) -> None:
    assert Scrubber.of([secret]).text(f"got {sent} back") == "got *** back"


def test_the_longest_secret_is_masked_first() -> None:
    assert Scrubber.of(["bcdef", "abcdefg"]).text("x abcdefg y") == "x *** y"


def test_a_raw_body_that_is_not_utf8_is_masked_and_kept_as_bytes() -> None:
    error = RuntimeError(b"\xff\xfe key=sk-SECRET-1 \xff")
    Scrubber.of(["sk-SECRET-1"]).error(error)
    assert error.args == (b"\xff\xfe key=*** \xff",)


def test_header_values_are_masked_and_other_values_kept() -> None:
    error = RuntimeError("refused")
    error.headers = {"x-api-key": "sk-SECRET-1", "retry-after": 3}  # type: ignore[attr-defined]
    Scrubber.of(["sk-SECRET-1"]).error(error)
    assert error.headers == {"x-api-key": "***", "retry-after": 3}  # type: ignore[attr-defined]


def test_a_configuration_without_credentials_has_nothing_to_mask() -> None:
    assert Scrubber.for_config(ProviderConfig(identifier="c", provider="openai", model="m")).forms == ()


@pytest.mark.parametrize(("url", "shown"), [
    ("https://user:pa@ss@host.test/v1", "https://user:***@host.test/v1"),
    ("https://user:pa:ss@host.test/v1", "https://user:***@host.test/v1"),
    ("https://sk-lone-key@host.test/v1", "https://***@host.test/v1"),
    ("http://[::1/v1", "<a URL that does not parse>"),
])
def test_a_url_is_shown_without_its_credentials(url: str, shown: str) -> None:
    assert masked_url(url) == shown
