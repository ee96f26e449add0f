from __future__ import annotations

import logging
from typing import Any

import pytest
from provmw_calllog import CallLogMiddleware, CallLogOptions, redact

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.errors import ConfigurationError, ProviderUnavailableError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.responses import CompletionResponse
from provmw.settings import Settings

CONFIG = ProviderConfig(identifier="main", provider="openai", model="m", api_key="sk-calllog-SECRET")


def test_installed_plugin_is_discovered_at_its_priority() -> None:
    manager = ServiceManager(Settings(), host=PluginHost(PluginPolicy(allow=("calllog",)), environ={}))
    entry = next(e for e in manager.stack if e.name == "call_log")
    assert (entry.priority, entry.plugin) == (900, "calllog")
    assert manager.pipeline.order[0] == "call_log"


def test_settings_section_reaches_the_middleware() -> None:
    settings = Settings(middleware={"call_log": {"log_text": True, "level": "DEBUG"}})
    manager = ServiceManager(settings, host=PluginHost(PluginPolicy(allow=("calllog",)), environ={}))
    middleware = next(m for m in manager.pipeline.middlewares if m.name == "call_log")
    assert isinstance(middleware, CallLogMiddleware)
    assert middleware.options == CallLogOptions(level=logging.DEBUG, log_text=True)


def test_unknown_setting_is_refused_with_a_hint() -> None:
    settings = Settings(middleware={"call_log": {"log_txt": True}})
    with pytest.raises(ConfigurationError, match="did you mean 'log_text'"):
        ServiceManager(settings, host=PluginHost(PluginPolicy(allow=("calllog",)), environ={}))


async def answer(config: ProviderConfig) -> CompletionResponse:
    return CompletionResponse(provider="openai", model="m", served_by=config.identifier,
                              text="mail ada@example.com or call +1 415 555 0100")


async def test_logs_one_line_per_call_with_redacted_text(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="provmw.calls")
    middleware = CallLogMiddleware(CallLogOptions(log_text=True))
    ctx = ProviderCallContext(ProviderOperation.CHAT, "cid-1")
    await middleware.handle(ctx, CONFIG, answer)
    assert len(caplog.records) == 1
    line = caplog.records[0].getMessage()
    assert "cid-1 chat config=main" in line
    assert "[email]" in line and "[phone]" in line
    assert "ada@example.com" not in line and "sk-calllog-SECRET" not in line


async def test_logs_the_error_type_and_reraises(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="provmw.calls")

    async def failing(config: ProviderConfig) -> Any:
        raise ProviderUnavailableError("down", provider="openai")

    with pytest.raises(ProviderUnavailableError):
        await CallLogMiddleware().handle(ProviderCallContext(ProviderOperation.CHAT), CONFIG, failing)
    assert "error=ProviderUnavailableError" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write to a.b+c@mail.example.org now", "write to [email] now"),
        ("call 020 7946 0958", "call [phone]"),
        ("call (415) 555-0100.", "call [phone]."),
        ("version 3.11 and 42 items", "version 3.11 and 42 items"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected
