"""An ad-hoc call given no key reads the provider's usual variable (issue #21, item 7)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from provmw.errors import ConfigurationError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.providers.anthropic import AnthropicAdapter
from provmw.providers.openai import OpenAIAdapter
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, LOOPBACK_ALLOWED, SENTINEL_KEY


@pytest.fixture
async def keyed() -> AsyncIterator[FakeProvider]:
    """A fake that answers 401 unless the request carries ``SENTINEL_KEY``."""
    async with FakeProvider(api_key=SENTINEL_KEY) as server:
        yield server


@pytest.fixture
async def manager(builtin_only: PluginHost) -> AsyncIterator[ServiceManager]:
    settings = Settings(middleware=BUILTIN_MIDDLEWARE_OFF, destinations=LOOPBACK_ALLOWED)
    async with ServiceManager(settings, host=builtin_only) as manager:
        yield manager


def test_the_builtin_adapters_declare_their_variables() -> None:
    assert (OpenAIAdapter.api_key_env, AnthropicAdapter.api_key_env) == ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")


async def test_an_ad_hoc_call_to_another_host_with_no_key_is_refused_before_sending(
        manager: ServiceManager, keyed: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL_KEY)
    with pytest.raises(ConfigurationError, match="needs api_key=: OPENAI_API_KEY holds the credentials of its own"):
        await manager.chat("hi", provider="openai", model="m", base_url=keyed.openai_base_url)
    assert keyed.count() == 0


async def test_an_ad_hoc_anthropic_call_to_another_host_is_refused_too(
        manager: ServiceManager, keyed: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SENTINEL_KEY)
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        await manager.chat("hi", provider="anthropic", model="m", base_url=keyed.anthropic_base_url)
    assert keyed.count() == 0


def test_the_variable_is_used_for_the_providers_own_endpoint(
        manager: ServiceManager, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SENTINEL_KEY)
    key = manager.resolve(provider="anthropic", model="m", base_url="https://API.anthropic.com/").api_key
    assert key is not None and key.reveal() == SENTINEL_KEY


def test_the_refusal_never_shows_credentials_in_the_base_url(
        manager: ServiceManager, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL_KEY)
    with pytest.raises(ConfigurationError) as refused:
        manager.resolve(provider="openai", model="m", base_url="https://user:hunter2@evil.example/v1")
    assert "hunter2" not in str(refused.value) and SENTINEL_KEY not in str(refused.value)


async def test_an_ad_hoc_call_to_another_host_goes_without_a_key_when_the_variable_is_unset(
        manager: ServiceManager, fake: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    await manager.chat("hi", provider="openai", model="m", base_url=fake.openai_base_url)
    assert "Authorization" not in fake.received[0].headers


async def test_a_key_given_to_the_call_wins_over_the_variable(
        manager: ServiceManager, keyed: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    await manager.chat("hi", provider="openai", model="m", base_url=keyed.openai_base_url, api_key=SENTINEL_KEY)
    assert keyed.received[0].headers["Authorization"] == f"Bearer {SENTINEL_KEY}"


def test_the_variable_is_read_when_the_ad_hoc_configuration_is_made(
        manager: ServiceManager, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert manager.resolve(provider="openai", model="m").api_key is None
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL_KEY)
    key = manager.resolve(provider="openai", model="m").api_key
    assert key is not None and key.reveal() == SENTINEL_KEY


def test_the_key_from_the_variable_is_never_logged(
        manager: ServiceManager, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL_KEY)
    with caplog.at_level(logging.DEBUG):
        config = manager.resolve(provider="openai", model="m")
    assert SENTINEL_KEY not in caplog.text + repr(config) + str(config)


def test_another_port_on_the_providers_host_is_another_endpoint(
        manager: ServiceManager, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL_KEY)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        manager.resolve(provider="openai", model="m", base_url="https://api.openai.com:8443/v1")
