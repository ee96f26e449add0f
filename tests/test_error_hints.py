"""Errors a newcomer meets first name what was wrong: the URL of a 404, a busy port, the file."""

from __future__ import annotations

import io
import socket
from pathlib import Path

import pytest

from provmw.cli import main
from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError, InvalidRequestError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import load_settings
from provmw.testing import FakeProvider
from tests.conftest import SENTINEL_KEY


def without_v1(fake: FakeProvider, provider: str = "openai") -> ProviderConfig:
    base_url = fake.openai_base_url.removesuffix("/v1") if provider == "openai" else fake.url + "/nowhere"
    return ProviderConfig(identifier="a", provider=provider, model="m", base_url=base_url, api_key=SENTINEL_KEY)


async def call(fake: FakeProvider, builtin_only: PluginHost, provider: str) -> InvalidRequestError:
    from provmw.settings import Settings

    settings = Settings(configurations={"a": without_v1(fake, provider)}, middleware={"usage": {"store": "memory"},
                                                                                      "budget": {"store": "memory"}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        with pytest.raises(InvalidRequestError) as raised:
            await manager.chat("hi")
    return raised.value


async def test_a_404_names_the_url_and_asks_about_v1(fake: FakeProvider, builtin_only: PluginHost) -> None:
    error = await call(fake, builtin_only, "openai")
    assert f"404 from {fake.url}/chat/completions; does base_url end in /v1?" in str(error)


async def test_the_v1_hint_is_the_openai_adapters_only(fake: FakeProvider, builtin_only: PluginHost) -> None:
    error = await call(fake, builtin_only, "anthropic")
    assert f"404 from {fake.url}/nowhere/v1/messages)" in str(error)
    assert "/v1?" not in str(error)


def test_fake_provider_on_a_busy_port_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["fake-provider", "--port", str(port)], out=io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err == f"provmw: fake-provider: port {port} on 127.0.0.1 is taken (another fake provider?); " \
                  "try --port with another number\n"


def test_an_unknown_provider_names_the_settings_file(tmp_path: Path, builtin_only: PluginHost) -> None:
    (tmp_path / "provmw.toml").write_text('[configurations.a]\nprovider = "opneai"\nmodel = "m"\n')
    with pytest.raises(ConfigurationError, match=r"^provmw.toml: \[configurations.a\] provider: .*'opneai' "
                                                 r"\(did you mean 'openai'\?\)"):
        ServiceManager(load_settings(), host=builtin_only)

