"""Key and header variables are read when a configuration is first used, not when the file loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings, load_settings
from provmw.testing import FakeProvider, Fault

CHAIN = """
default = "primary"

[configurations.primary]
provider = "openai"
model = "gpt-test"
base_url = "{openai}"
api_key_env = "PRIMARY_KEY"
fallbacks = ["backup"]

[configurations.backup]
provider = "anthropic"
model = "claude-test"
base_url = "{anthropic}"
api_key_env = "BACKUP_KEY"

[middleware.retry]
max_attempts = 1
"""


def chain(tmp_path: Path, fake: FakeProvider, environ: dict[str, str]) -> ServiceManager:
    path = tmp_path / "provmw.toml"
    path.write_text(CHAIN.format(openai=fake.openai_base_url, anthropic=fake.anthropic_base_url))
    settings = load_settings(path, environ=environ)
    return ServiceManager(settings, host=PluginHost(settings.plugins, environ={}))


async def test_a_fallback_that_never_runs_needs_no_key(fake: FakeProvider, tmp_path: Path) -> None:
    async with chain(tmp_path, fake, {"PRIMARY_KEY": "sk-primary"}) as manager:
        answer = await manager.chat("hi")
    assert answer.served_by == "primary"
    assert fake.received[-1].headers["Authorization"] == "Bearer sk-primary"


async def test_a_call_on_a_configuration_without_its_key_names_the_variable(fake: FakeProvider,
                                                                              tmp_path: Path) -> None:
    async with chain(tmp_path, fake, {"BACKUP_KEY": "sk-backup"}) as manager:
        with pytest.raises(ConfigurationError, match=r"\[configurations.primary\] api_key_env: .*PRIMARY_KEY"):
            await manager.chat("hi")
    assert not fake.received


async def test_a_fallback_reached_without_its_key_names_the_variable(fake: FakeProvider, tmp_path: Path) -> None:
    fake.script(Fault(status=503), route="chat")
    async with chain(tmp_path, fake, {"PRIMARY_KEY": "sk-primary"}) as manager:
        with pytest.raises(ConfigurationError, match=r"\[configurations.backup\] api_key_env: .*BACKUP_KEY") as caught:
            await manager.chat("hi")
    assert caught.value.__cause__ is not None and "503" in str(caught.value.__cause__)


async def test_the_variable_is_read_when_used_not_when_loaded(fake: FakeProvider, tmp_path: Path) -> None:
    environ: dict[str, str] = {}
    async with chain(tmp_path, fake, environ) as manager:
        environ["PRIMARY_KEY"] = "sk-later"
        await manager.chat("hi")
    assert fake.received[-1].headers["Authorization"] == "Bearer sk-later"


def test_a_configuration_is_read_again_only_when_its_variables_change() -> None:
    environ = {"KEY_A": "sk-one"}
    config = ProviderConfig(identifier="a", provider="openai", model="m", api_key_env="KEY_A")
    settings = Settings(configurations={"a": config}, environ=environ)
    first = settings.with_credentials(config)
    assert settings.with_credentials(config) is first
    environ["KEY_A"] = "sk-two"
    rotated = settings.with_credentials(config)
    assert rotated.api_key is not None and rotated.api_key.reveal() == "sk-two"
