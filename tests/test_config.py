from __future__ import annotations

import logging
import pickle

import pytest

from provmw.config import ProviderConfig, Secret
from provmw.errors import ConfigurationError

KEY = "sk-live-0123456789abcdef"


def make(**fields: object) -> ProviderConfig:
    values: dict[str, object] = {"identifier": "main", "provider": "openai", "model": "gpt-4o-mini"}
    values.update(fields)
    return ProviderConfig(**values)  # type: ignore[arg-type]


def test_api_key_is_masked_in_repr_and_str() -> None:
    config = make(api_key=KEY)
    assert KEY not in repr(config)
    assert KEY not in str(config)
    assert KEY not in f"{config.api_key}"


def test_api_key_is_masked_in_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    logging.getLogger("t").info("config %s key %s %r", make(api_key=KEY), make(api_key=KEY).api_key, KEY[:0])
    assert KEY not in caplog.text


def test_secret_reveals_only_on_request() -> None:
    assert Secret(KEY).reveal() == KEY
    assert Secret(KEY) == Secret(KEY)


def test_header_values_are_not_shown_in_repr() -> None:
    config = make(headers={"X-Gateway-Token": "hidden-token"})
    assert "hidden-token" not in repr(config)
    assert "X-Gateway-Token" in repr(config)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"identifier": ""}, "identifier"),
        ({"model": "  "}, "model"),
        ({"provider": 3}, "provider"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": -1.5}, "timeout_s"),
        ({"timeout_s": float("nan")}, "timeout_s"),
        ({"base_url": "ftp://x"}, "base_url"),
        ({"options": {"temperature": "hot"}}, "options.temperature"),
        ({"options": {"temprature": 0.1}}, "did you mean 'temperature'"),
        ({"options": {"max_tokens": 1.5}}, "options.max_tokens"),
        ({"fallbacks": "backup"}, "fallbacks"),
        ({"active": "yes"}, "active"),
        ({"context_window": 0}, "context_window"),
    ],
)
def test_invalid_values_raise_configuration_error_naming_the_field(fields: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        make(**fields)


def test_ad_hoc_configuration_shape() -> None:
    config = ProviderConfig.ad_hoc("openai", "gpt-4o", fallbacks=("x",), api_key=KEY)
    assert config.identifier == "ad-hoc:openai/gpt-4o"
    assert config.is_ad_hoc
    assert config.fallbacks == ()


def test_config_is_picklable_and_keeps_its_key() -> None:
    config = make(api_key=KEY, options={"temperature": 0.0}, fallbacks=["b"])
    restored = pickle.loads(pickle.dumps(config))
    assert restored == config
    assert restored.api_key is not None and restored.api_key.reveal() == KEY


@pytest.mark.parametrize("field", ["identifier", "provider", "model"])
def test_a_name_with_a_control_character_is_refused(field: str) -> None:
    values = {"identifier": "c", "provider": "openai", "model": "m", field: "m\nERROR forged line"}
    with pytest.raises(ConfigurationError, match=f"{field} must be printable text"):
        ProviderConfig(**values)  # type: ignore[arg-type]


def test_credentials_in_the_base_url_and_an_api_key_together_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="carries credentials and api_key is set too") as caught:
        ProviderConfig(identifier="c", provider="openai", model="m", base_url="https://u:pw-secret@h.test/v1",
                       api_key="sk-x")
    assert "pw-secret" not in str(caught.value)
