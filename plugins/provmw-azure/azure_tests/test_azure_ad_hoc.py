"""An ad-hoc Azure call to a base_url of the caller's never carries the operator's Entra ID token
(issue 33 item 3): with no api_key it is refused before anything is sent."""

from __future__ import annotations

import pytest

from provmw.errors import ConfigurationError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import Settings

from .test_azure_echoed_credentials import _EntraAzure


def manager(monkeypatch: pytest.MonkeyPatch) -> ServiceManager:
    monkeypatch.delenv("AZURE_OPENAI_API_KEY", raising=False)
    host = PluginHost(PluginPolicy(autoload=False), environ={})
    host.register(_EntraAzure(), "azure")
    return ServiceManager(Settings(), host=host)


def test_an_ad_hoc_call_to_another_host_is_refused_rather_than_sent_the_entra_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="needs api_key=: the azure adapter signs with"):
        manager(monkeypatch).resolve(provider="azure", model="gpt-4o",
                                     base_url="https://attacker.example/openai/deployments/d")


def test_an_ad_hoc_call_that_brings_its_key_goes_with_that_key_only(monkeypatch: pytest.MonkeyPatch) -> None:
    config = manager(monkeypatch).resolve(provider="azure", model="gpt-4o", api_key="caller-key",
                                          base_url="https://mine.example/openai/deployments/d")
    assert config.api_key is not None and config.api_key.reveal() == "caller-key"
