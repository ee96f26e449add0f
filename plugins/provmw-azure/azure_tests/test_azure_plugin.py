"""The plugin registers as any third-party one: the entry point, the hook, a registered token provider."""

from __future__ import annotations

from pathlib import Path

import provmw_azure
import pytest
from provmw_azure import AzureOpenAIAdapter
from provmw_azure.tokens import ENTRY_POINT_GROUP, registered_token_provider

from provmw.errors import PluginError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import PluginPolicy, parse_settings
from provmw.testing import FakeProvider


def installed(root: Path, name: str, entry_points: dict[str, str]) -> None:
    """A distribution ``name`` on ``root`` (on sys.path) declaring ``entry_points`` in the token group."""
    info = root / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}")


def test_the_entry_point_registers_the_azure_adapter() -> None:
    host = PluginHost(PluginPolicy(allow=("azure",)), environ={})
    assert isinstance(host.collect_providers()["azure"], AzureOpenAIAdapter)


def test_no_token_provider_is_registered_by_default() -> None:
    assert registered_token_provider() is None


def test_a_package_registers_its_token_provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tokens_app.py").write_text("async def token():\n    return 'entra-token', 2e9\n")
    installed(tmp_path, "tokens_app", {"entra": "tokens_app:token"})
    monkeypatch.syspath_prepend(str(tmp_path))
    provider = registered_token_provider()
    assert provider is not None and provider.__module__ == "tokens_app"


def test_two_registered_token_providers_are_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    installed(tmp_path, "two_tokens", {"one": "a:token", "two": "b:token"})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match="2 Entra ID token providers"):
        registered_token_provider()


async def test_a_named_configuration_reaches_a_deployment_through_the_stack(fake: FakeProvider) -> None:
    document = {"default": "main", "configurations": {"main": {
        "provider": "azure", "model": "gpt-4o-prod", "base_url": fake.url, "api_key_env": "AZURE_OPENAI_API_KEY"}}}
    settings = parse_settings(document, "test", {"AZURE_OPENAI_API_KEY": "k-123456"})
    host = PluginHost(PluginPolicy(autoload=False), environ={})
    host.register(provmw_azure, "azure")
    async with ServiceManager(settings, host=host) as manager:
        answer = await manager.chat("hello there")
        streamed = [chunk.text async for chunk in manager.stream_chat("hello again")]
    assert (answer.text, answer.provider, answer.served_by) == ("echo: hello there", "azure", "main")
    assert "".join(streamed).strip() == "echo: hello again"
    assert fake.count(route="azure_chat", model="gpt-4o-prod") == 2
