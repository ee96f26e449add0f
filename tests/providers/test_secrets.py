"""The sentinel API key never appears in an exception, a repr, or a log line."""

from __future__ import annotations

import logging
import socket
import traceback

import pytest

from provmw.config import ProviderConfig
from provmw.errors import ProviderError
from provmw.http import HttpClient
from provmw.manager import ServiceManager
from provmw.messages import Message
from provmw.plugins import PluginHost
from provmw.providers.openai import OpenAIAdapter
from provmw.requests import ChatRequest
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault
from tests.conftest import SENTINEL_KEY, openai_config

CHAT = ChatRequest((Message.user("hi"),))


def assert_clean(exc: BaseException, caplog: pytest.LogCaptureFixture) -> None:
    text = "".join(traceback.format_exception(exc)) + repr(exc) + str(vars(exc)) + caplog.text
    assert SENTINEL_KEY not in text


async def test_connection_error_does_not_contain_the_key(http: HttpClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = ProviderConfig(identifier="x", provider="openai", model="m", api_key=SENTINEL_KEY,
                            base_url=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(ProviderError) as caught:
        await OpenAIAdapter().chat(http, config, CHAT)
    assert_clean(caught.value, caplog)


async def test_manager_failure_and_reprs_do_not_contain_the_key(
        fake: FakeProvider, builtin_only: PluginHost, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    settings = Settings(configurations={"oa": openai_config(fake)})
    fake.script(Fault(status=500, message="internal"))
    async with ServiceManager(settings, host=builtin_only) as manager:
        with pytest.raises(ProviderError) as caught:
            await manager.chat("hi", controls={"max_attempts": 1})
        assert SENTINEL_KEY not in repr(manager.settings) + repr(manager.resolve())
    assert_clean(caught.value, caplog)
