"""Every form a secret comes back in is masked (URL-encoded, base64 padded or not, in bytes, in headers),
the longest first; URLs are shown without their credentials."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from provmw.config import ProviderConfig
from provmw.scrubbing import Scrubber, masked_url


@pytest.mark.parametrize(("secret", "sent"), [
    ("pass word/1", "pass%20word%2F1"),  # URL-encoded with nothing left safe
    ("abcd1", "YWJjZDE"),  # base64 with its padding dropped
    (">>>?", "Pj4+Pw"),  # standard base64 (not URL-safe), unpadded
    (">>>?", "Pj4-Pw"),  # URL-safe base64, unpadded
])
def test_an_encoded_secret_is_masked_in_the_middle_of_a_text(secret: str, sent: str) -> None:
    assert Scrubber.of([secret]).text(f"got {sent} back") == "got *** back"


def test_the_longest_secret_is_masked_first() -> None:
    assert Scrubber.of(["bcdef", "abcdefg"]).text("x abcdefg y") == "x *** y"


def test_a_secret_cut_short_at_the_end_is_masked_even_when_its_start_repeats() -> None:
    assert Scrubber.of(["abcdefabcdefXYZ12"]).text("body: abcdefabcdef") == "body: ***"


def test_a_start_of_a_secret_followed_by_other_text_is_left_alone() -> None:
    assert Scrubber.of(["abcdefgh"]).text("x abcdefQ") == "x abcdefQ"


def test_a_cycle_of_chained_errors_is_scrubbed_once_each() -> None:
    first, second = RuntimeError("key sk-SECRET-1"), ValueError("again sk-SECRET-1")
    first.__context__, second.__context__ = second, first
    Scrubber.of(["sk-SECRET-1"]).error(first)
    assert (first.args, second.args) == (("key ***",), ("again ***",))


def test_a_raw_body_that_is_not_utf8_is_masked_and_kept_as_bytes() -> None:
    error = RuntimeError(b"\xff\xfe key=sk-SECRET-1 \xff")
    Scrubber.of(["sk-SECRET-1"]).error(error)
    assert error.args == (b"\xff\xfe key=*** \xff",)


def test_header_values_are_masked_and_other_values_kept() -> None:
    error = RuntimeError("refused")
    error.headers = {"x-api-key": "sk-SECRET-1", "retry-after": 3}  # type: ignore[attr-defined]
    Scrubber.of(["sk-SECRET-1"]).error(error)
    assert error.headers == {"x-api-key": "***", "retry-after": 3}  # type: ignore[attr-defined]


class Headers(Mapping[str, object]):
    """A read-only mapping with no ``copy``, as some clients' header types are."""

    def __init__(self, items: dict[str, object]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> object:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class Copyable(Headers):
    """One whose copy is of its own kind, built from a dict only."""

    def __init__(self, items: dict[str, object]) -> None:
        if not isinstance(items, dict):
            raise TypeError("a dict, please")
        super().__init__(items)

    def copy(self) -> Copyable:
        return Copyable(dict(self._items))


@pytest.mark.parametrize("headers", [Headers({"x-api-key": "sk-SECRET-1"}), Copyable({"x-api-key": "sk-SECRET-1"})])
def test_headers_of_a_kind_that_cannot_be_rebuilt_become_a_dict(headers: Mapping[str, object]) -> None:
    error = RuntimeError("refused")
    error.headers = headers  # type: ignore[attr-defined]
    Scrubber.of(["sk-SECRET-1"]).error(error)
    assert error.headers == {"x-api-key": "***"}  # type: ignore[attr-defined]


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


def test_an_error_leaving_a_scrubber_block_goes_on_scrubbed() -> None:
    with pytest.raises(RuntimeError) as raised, Scrubber.of(["sk-SECRET-1"]):
        raise RuntimeError("sent sk-SECRET-1")
    assert raised.value.args == ("sent ***",)
