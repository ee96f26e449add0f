"""Where a configuration's region and credentials come from, and when they are resolved."""

from __future__ import annotations

import datetime
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import botocore.session
import pytest
from botocore.credentials import CredentialProvider, RefreshableCredentials
from provmw_bedrock import BedrockAdapter
from provmw_bedrock.fake import BedrockWire
from provmw_bedrock.signing import region_in

from bedrock_tests.conftest import ACCESS_KEY, SECRET_KEY
from bedrock_tests.sigv4_server import SigV4Server
from provmw.config import ProviderConfig
from provmw.errors import AuthenticationError, ConfigurationError
from provmw.http import HttpClient
from provmw.messages import Message
from provmw.requests import ChatRequest
from provmw.testing import FakeProvider

HELLO = ChatRequest((Message.user("hello world"),))






def signed(url: str, identifier: str = "signed") -> ProviderConfig:
    return ProviderConfig(identifier=identifier, provider="bedrock", model="m.v1", base_url=url)


class _Counting:
    """Real botocore sessions, counted."""

    def __init__(self, prepare: Callable[[botocore.session.Session], None] = lambda session: None) -> None:
        self.made = 0
        self._prepare = prepare

    def __call__(self) -> botocore.session.Session:
        self.made += 1
        session = botocore.session.Session()
        self._prepare(session)
        return session


@pytest.mark.parametrize(("url", "region"), [
    ("https://bedrock-runtime.us-west-2.amazonaws.com", "us-west-2"),
    ("https://bedrock-runtime-fips.us-gov-west-1.amazonaws.com/", "us-gov-west-1"),
    ("https://vpce-0a1b.bedrock-runtime.eu-central-1.vpce.amazonaws.com", "eu-central-1"),
    ("https://bedrock-runtime.cn-north-1.amazonaws.com.cn", "cn-north-1"),
    ("http://127.0.0.1:8080", None),
    (None, None),
])
def test_the_region_is_read_from_an_aws_endpoint(url: str | None, region: str | None) -> None:
    assert region_in(url) == region


async def test_credentials_are_resolved_once_per_configuration(server: SigV4Server, http: HttpClient) -> None:
    sessions = _Counting()
    adapter = BedrockAdapter(session=sessions)
    for identifier in ("one", "one", "two"):
        await adapter.chat(http, signed(server.url, identifier), HELLO)
    assert sessions.made == 2


async def test_refreshable_credentials_refresh_when_due(server: SigV4Server, http: HttpClient) -> None:
    refreshes: list[str] = []

    def refresh() -> dict[str, Any]:
        refreshes.append("refreshed")
        return {"access_key": "AKIDREFRESHED", "secret_key": "refreshed-secret", "token": None,
                "expiry_time": "2999-01-01T00:00:00Z"}

    class _Expiring(CredentialProvider):
        METHOD = "provmw-test"

        def load(self) -> RefreshableCredentials:
            expired = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
            return RefreshableCredentials(ACCESS_KEY, SECRET_KEY, "", expired, refresh, self.METHOD)

    sessions = _Counting(lambda session: session.get_component("credential_provider").insert_before("env",
                                                                                                    _Expiring()))
    await BedrockAdapter(session=sessions).chat(http, signed(server.url), HELLO)
    assert (refreshes, server.seen_keys) == (["refreshed"], ["AKIDREFRESHED"])


async def test_no_credentials_is_an_authentication_error_before_any_request(
        http: HttpClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    async with FakeProvider() as fake:
        with pytest.raises(AuthenticationError, match="no AWS credentials"):
            await BedrockAdapter().chat(http, signed(fake.url), HELLO)
        assert fake.count() == 0


async def test_no_region_is_a_configuration_error_naming_the_fixes(
        http: HttpClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(ConfigurationError, match="AWS_DEFAULT_REGION"):
        await BedrockAdapter().chat(http, ProviderConfig(identifier="x", provider="bedrock", model="m"), HELLO)


async def test_an_api_key_is_sent_as_a_bearer_token_unsigned(http: HttpClient) -> None:
    async with FakeProvider(wires=[BedrockWire()]) as fake:
        keyed = ProviderConfig(identifier="k", provider="bedrock", model="m.v1", base_url=fake.url,
                               api_key="bedrock-api-key")
        await BedrockAdapter().chat(http, keyed, HELLO)
        headers = fake.received[-1].headers
    assert headers["Authorization"] == "Bearer bedrock-api-key"
    assert "X-Amz-Date" not in headers


def test_importing_provmw_and_the_plugin_does_not_import_botocore() -> None:
    code = ("import sys, provmw, provmw_bedrock\n"
            "from provmw.plugins import PluginHost, PluginPolicy\n"
            "providers = PluginHost(PluginPolicy(), environ={}).load().collect_providers()\n"
            "assert type(providers['bedrock']).__name__ == 'BedrockAdapter', providers\n"
            "assert 'botocore' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
