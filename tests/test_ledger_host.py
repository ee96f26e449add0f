"""A ledger a plugin serves: ``[middleware.usage] store = "<scheme>://..."`` reaches the plugin of that
scheme through ``provmw_usage_store``, and its URL's password never shows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from provmw.errors import ConfigurationError, PluginError
from provmw.manager import ServiceManager
from provmw.middleware import USAGE, section_options
from provmw.plugins import PluginHost, hookimpl
from provmw.settings import Settings
from provmw.state import open_state
from provmw.stores.shared import masked_url
from provmw.stores.usage import MemoryUsageStore
from provmw.testing import FakeProvider
from tests.conftest import openai_config

URL = "mem://ledger:s3cret-pw@db.example/usage"


class LedgerStore(MemoryUsageStore):
    """A memory ledger that remembers the URL and options it was opened with."""

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        super().__init__()
        self.url, self.options = url, dict(options)


def serving(scheme: str) -> object:
    class LedgerPlugin:
        @hookimpl
        def provmw_usage_store(self, url: str, options: Mapping[str, Any]) -> LedgerStore | None:
            return LedgerStore(url, options) if url.startswith(f"{scheme}://") else None

        @hookimpl
        def provmw_usage_schemes(self) -> Iterable[str]:
            return [scheme]

    return LedgerPlugin()


def ledger_settings(url: str = URL, **usage: Any) -> Settings:
    return Settings(middleware={"usage": {"store": url, **usage}})


def test_a_url_store_comes_from_the_plugin_serving_its_scheme(builtin_only: PluginHost) -> None:
    builtin_only.register(serving("mem"), "mem")
    store = builtin_only.collect_ledger(ledger_settings(table="fleet", failure_policy="fail_closed"))
    assert isinstance(store, LedgerStore)
    assert (store.url, store.options) == (URL, {"table": "fleet"})  # the core's own keys stay with the core


def test_sqlite_and_memory_ledgers_need_no_plugin(builtin_only: PluginHost) -> None:
    assert builtin_only.collect_ledger(ledger_settings("memory")) is None
    assert builtin_only.collect_ledger(Settings()) is None


def test_an_unserved_scheme_names_the_installed_ones(builtin_only: PluginHost) -> None:
    builtin_only.register(serving("mem"), "mem")
    with pytest.raises(ConfigurationError, match=r"no loaded plugin serves mysql:// ledgers; built in: "
                                                 r"sqlite, memory; served by plugins: mem"):
        builtin_only.collect_ledger(ledger_settings("mysql://db.example/usage"))


def test_two_plugins_serving_one_scheme_is_an_error(builtin_only: PluginHost) -> None:
    builtin_only.register(serving("mem"), "one")
    builtin_only.register(serving("mem"), "two")
    with pytest.raises(PluginError, match="all serve mem:// ledgers"):
        builtin_only.collect_ledger(ledger_settings())


def test_the_password_shows_in_no_error_and_no_repr(builtin_only: PluginHost) -> None:
    shown = [repr(section_options(ledger_settings(), USAGE))]
    for attempt in (lambda: builtin_only.collect_ledger(ledger_settings(URL.replace("mem", "pg"))),
                    lambda: open_state(ledger_settings())):
        with pytest.raises(ConfigurationError) as caught:
            attempt()
        shown.append(str(caught.value))
    assert "ledger:***@db.example" in shown[0] and "ledger:***@db.example" in shown[2]
    assert not any("s3cret-pw" in text for text in shown)


def test_a_password_parameter_is_masked_too() -> None:
    assert masked_url("postgresql://db/usage?sslmode=require&password=pw1") == \
        "postgresql://db/usage?sslmode=require&password=***"


def test_a_store_that_is_no_url_names_what_is_accepted() -> None:
    with pytest.raises(ConfigurationError, match=r"\[middleware.usage\]: store must be sqlite, memory or the URL"):
        section_options(ledger_settings("postgres"), USAGE)


def test_keys_no_store_owns_are_still_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown key 'table'"):
        section_options(ledger_settings("sqlite", table="fleet"), USAGE)


async def test_every_attempt_is_recorded_in_the_plugin_ledger(fake: FakeProvider, builtin_only: PluginHost) -> None:
    builtin_only.register(serving("mem"), "mem")
    settings = Settings(configurations={"oa": openai_config(fake)}, middleware={"usage": {"store": URL}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        response = await manager.chat("hello", user="ada", correlation_id="order-1")
        await manager.state.usage_journal().flush()
        [record] = await manager.state.usage_journal().store.records()
    assert (record.correlation_id, record.user, record.output_tokens) == ("order-1", "ada",
                                                                          response.usage.output_tokens)


def test_a_plugin_ledger_spills_beside_the_settings_path(builtin_only: PluginHost) -> None:
    builtin_only.register(serving("mem"), "mem")
    settings = ledger_settings(path="fleet.sqlite3")
    state = open_state(settings, ledger=builtin_only.collect_ledger(settings))
    spill = state.usage_journal().spill
    assert spill is not None and spill.path.name == "fleet.sqlite3.spill"
