"""Header values read from the environment (``headers_env``), as the key is (``api_key_env``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provmw.errors import ConfigurationError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import load_settings
from provmw.testing import FakeProvider

AZURE = """
[configurations.azure]
provider = "openai"
model = "m"
base_url = "{base_url}"
headers = {{ "x-team" = "blue" }}
headers_env = {{ "api-key" = "AZURE_OPENAI_KEY" }}
"""


def write(tmp_path: Path, base_url: str = "http://127.0.0.1:9/v1") -> Path:
    path = tmp_path / "provmw.toml"
    path.write_text(AZURE.format(base_url=base_url))
    return path


async def test_the_header_value_comes_from_the_variable(fake: FakeProvider, tmp_path: Path,
                                                        builtin_only: PluginHost) -> None:
    settings = load_settings(write(tmp_path, fake.openai_base_url), environ={"AZURE_OPENAI_KEY": "az-secret"})
    async with ServiceManager(settings, host=builtin_only) as manager:
        await manager.chat("hi")
    assert fake.received[-1].headers["api-key"] == "az-secret"
    assert fake.received[-1].headers["x-team"] == "blue"


def test_a_missing_variable_is_named_when_the_configuration_is_used(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path), environ={})
    with pytest.raises(ConfigurationError, match=r"provmw.toml: \[configurations.azure\] headers_env.api-key: "
                                                 "environment variable AZURE_OPENAI_KEY is not set"):
        settings.configuration("azure")


def test_the_value_never_shows_in_the_configurations_repr(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path), environ={"AZURE_OPENAI_KEY": "az-secret"})
    assert "az-secret" not in repr(settings.configuration("azure"))


def test_a_header_in_both_tables_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path)
    path.write_text(path.read_text().replace('"x-team"', '"api-key"'))
    with pytest.raises(ConfigurationError, match="headers_env.api-key: also given in headers"):
        load_settings(path, environ={"AZURE_OPENAI_KEY": "az-secret"})


def test_a_variable_name_that_is_not_a_string_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path)
    path.write_text(path.read_text().replace('"AZURE_OPENAI_KEY"', "7"))
    with pytest.raises(ConfigurationError, match="headers_env.api-key: must name an environment variable, got 7"):
        load_settings(path, environ={})
