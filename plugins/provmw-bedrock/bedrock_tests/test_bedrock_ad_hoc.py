"""An ad-hoc Bedrock call to a base_url of the caller's is never signed with the operator's AWS
credentials (issue 33 item 3): with no api_key it is refused before anything is sent."""

from __future__ import annotations

import provmw_bedrock
import pytest

from provmw.errors import ConfigurationError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import Settings


def manager() -> ServiceManager:
    host = PluginHost(PluginPolicy(autoload=False), environ={})
    host.register(provmw_bedrock, "bedrock")
    return ServiceManager(Settings(), host=host)


def test_an_ad_hoc_call_to_another_host_is_refused_rather_than_signed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_BEARER_TOKEN_BEDROCK", raising=False)
    with pytest.raises(ConfigurationError, match="needs api_key=: the bedrock adapter signs with"):
        manager().resolve(provider="bedrock", model="anthropic.claude-3-haiku", base_url="https://attacker.example")


def test_an_ad_hoc_call_to_bedrocks_own_regional_endpoint_may_be_signed() -> None:
    config = manager().resolve(provider="bedrock", model="anthropic.claude-3-haiku")
    assert config.base_url is None and config.api_key is None
