"""Finding 3: credentials inside a URL (a user part's password, key-like query values) are
masked wherever a URL is shown: configuration and settings reprs, errors, ``provmw stack``."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.cli import main
from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError
from provmw.scrubbing import masked_url
from provmw.settings import Settings, parse_settings

URL = "https://user:pw-8d2b4a-secret@gw.test/v1?api-version=2024&Api_Key=qk-3c9e7d-secret&sig=sg-77aa"
SECRETS = ("pw-8d2b4a-secret", "qk-3c9e7d-secret", "sg-77aa")


def test_a_configuration_repr_masks_the_credentials_of_its_url() -> None:
    shown = repr(ProviderConfig(identifier="g", provider="openai", model="m", base_url=URL))
    assert "https://user:***@gw.test/v1?api-version=2024&Api_Key=***&sig=***" in shown
    assert not any(secret in shown for secret in SECRETS)


def test_a_settings_repr_masks_the_credentials_of_its_urls() -> None:
    settings = Settings(configurations={"g": ProviderConfig(identifier="g", provider="openai", model="m",
                                                            base_url=URL)})
    assert not any(secret in repr(settings) for secret in SECRETS)


def test_an_invalid_url_error_masks_its_credentials() -> None:
    with pytest.raises(ConfigurationError, match=r"ftp://user:\*\*\*@gw.test") as caught:
        ProviderConfig(identifier="g", provider="openai", model="m", base_url=URL.replace("https", "ftp"))
    assert not any(secret in str(caught.value) for secret in SECRETS)


def test_a_settings_file_url_error_masks_its_credentials() -> None:
    document = {"configurations": {"g": {"provider": "openai", "model": "m", "base_url": "ws://" + URL[8:]}}}
    with pytest.raises(ConfigurationError, match=r"\[configurations.g\] base_url") as caught:
        parse_settings(document, "f.toml", {})
    assert not any(secret in str(caught.value) for secret in SECRETS)


def test_a_lone_user_part_is_masked_as_the_key_it_is() -> None:
    assert masked_url("https://sk-userkey-1234@gw.test/v1") == "https://***@gw.test/v1"


def test_provmw_stack_masks_a_redis_password_given_as_a_query_parameter(tmp_path: Path) -> None:
    settings = tmp_path / "provmw.toml"
    settings.write_text('[plugins]\nallow = ["redis"]\n[state]\n'
                        'url = "redis://127.0.0.1:6379/0?pass%77ord=rd-51f0-secret&db=0"\nshared = ["budget"]\n')
    out = io.StringIO()
    assert main(["--config", str(settings), "stack"], out=out) == 0
    assert "shared state: redis://127.0.0.1:6379/0?pass%77ord=***&db=0" in out.getvalue()
    assert "rd-51f0-secret" not in out.getvalue()


@given(password=st.from_regex(r"[0-9]{8,20}", fullmatch=True), value=st.from_regex(r"[0-9]{8,20}", fullmatch=True),
       name=st.sampled_from(["key", "API_KEY", "x-goog-api-key", "token", "access_token", "Sig", "signature",
                             "password", "client_secret", "auth"]))
def test_masked_url_hides_every_credential(password: str, value: str, name: str) -> None:
    shown = masked_url(f"https://u:{password}@h.test:8443/v1?a=1&{name}={value}")
    assert password not in shown and value not in shown
    assert shown.startswith("https://u:***@h.test:8443/v1?a=1&")
