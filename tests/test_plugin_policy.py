"""Plugin policy against a hostile install: the autoload switch fails safe, a distribution that claims
another's entry-point name is refused before either is imported, and garbage from a hook is named."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.errors import ConfigurationError, PluginError
from provmw.plugins import PluginHost, PluginPolicy, hookimpl
from provmw.settings import Settings, parse_settings
from provmw.state import State
from provmw.stores.shared import StateSettings
from tests.test_plugins import GOOD, install_dist

OFF = ("", "0", "false", "no", "off")

# A plugin module that leaves a file beside itself when imported: the proof that its code ran.
MARKED = textwrap.dedent(GOOD) + "\nimport pathlib\npathlib.Path(__file__).with_suffix('.imported').touch()\n"


@pytest.fixture
def clash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Two distributions both publishing the entry point ``stamp``."""
    monkeypatch.syspath_prepend(str(tmp_path))
    install_dist(tmp_path, "provmw-stamp", "stamp", "provmw_stamp_real", MARKED)
    install_dist(tmp_path, "evil-stamp", "stamp", "provmw_stamp_impostor", MARKED)
    yield tmp_path
    for module in ("provmw_stamp_real", "provmw_stamp_impostor"):  # so the next test imports afresh
        sys.modules.pop(module, None)


def imported(site: Path) -> set[str]:
    return {path.stem for path in site.glob("*.imported")}


@pytest.mark.parametrize("value", ["1", "TRUE", "True", "on", "ON", " yes ", "True\n"])
def test_a_true_value_in_any_case_and_padding_disables_autoload(value: str) -> None:
    policy = PluginPolicy().with_environment({"PROVMW_DISABLE_PLUGIN_AUTOLOAD": value})
    assert policy.autoload is False


@pytest.mark.parametrize("value", ["enabled", "2", "0 1", "nope"])
def test_a_value_neither_true_nor_false_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigurationError, match=f"PROVMW_DISABLE_PLUGIN_AUTOLOAD: {value!r} is neither"):
        PluginPolicy().with_environment({"PROVMW_DISABLE_PLUGIN_AUTOLOAD": value})


@pytest.mark.parametrize("entry", ["Redis", " REDIS ", "Provmw_Redis:Redis"])
def test_a_block_entry_matches_whatever_its_case(entry: str) -> None:
    policy = PluginPolicy().with_environment({"PROVMW_BLOCKED_PLUGINS": entry})
    assert policy.status_of("redis", "provmw-redis") == "blocked"


def test_an_allow_entry_matches_whatever_its_case() -> None:
    policy = PluginPolicy(allow=["OTel"])
    assert (policy.status_of("otel", "provmw-otel"), policy.status_of("redis", "provmw-redis")) == (None, "not-allowed")


@given(st.sampled_from(OFF), st.sampled_from(["", " ", "\t"]), st.booleans())
def test_the_off_values_in_any_case_and_padding_leave_autoload_on(value: str, pad: str, upper: bool) -> None:
    text = pad + (value.upper() if upper else value.title()) + pad
    assert PluginPolicy().with_environment({"PROVMW_DISABLE_PLUGIN_AUTOLOAD": text}).autoload is True


def test_disable_switch_spelled_true_loads_only_the_builtin(clash: Path) -> None:
    host = PluginHost(environ={"PROVMW_DISABLE_PLUGIN_AUTOLOAD": "TRUE"}).load()
    assert {p.name for p in host.plugins if p.status == "loaded"} == {"provmw"}
    assert imported(clash) == set()


def test_two_distributions_with_one_name_are_refused_before_any_import(clash: Path) -> None:
    with pytest.raises(PluginError, match="'stamp' is published by 2 distributions: evil-stamp, provmw-stamp"):
        PluginHost(environ={"PROVMW_PLUGINS": "stamp"}).load()
    assert imported(clash) == set()


def test_a_clash_is_listed_as_failed_when_not_strict_and_nothing_is_imported(clash: Path) -> None:
    host = PluginHost(environ={}).load(strict=False)
    assert [(p.distribution, p.status) for p in host.plugins if p.name == "stamp"] == [
        ("evil-stamp", "failed"), ("provmw-stamp", "failed")]
    assert imported(clash) == set()


def test_a_distribution_qualified_allow_entry_loads_only_that_distribution(clash: Path) -> None:
    host = PluginHost(environ={"PROVMW_PLUGINS": "Provmw_Stamp:stamp"}).load()
    assert {p.distribution: p.status for p in host.plugins if p.name == "stamp"} == {
        "evil-stamp": "not-allowed", "provmw-stamp": "loaded"}
    assert imported(clash) == {"provmw_stamp_real"}


def test_a_distribution_qualified_block_entry_blocks_only_that_distribution(clash: Path) -> None:
    host = PluginHost(PluginPolicy(block=("evil-stamp:stamp",)), environ={}).load()
    assert {p.distribution: p.status for p in host.plugins if p.name == "stamp"} == {
        "evil-stamp": "blocked", "provmw-stamp": "loaded"}
    assert imported(clash) == {"provmw_stamp_real"}


@pytest.mark.parametrize("entry", [":stamp", "dist:", "a:b:c", " "])
def test_a_malformed_plugin_entry_in_the_settings_is_named(entry: str) -> None:
    with pytest.raises(ConfigurationError, match=r"<test>: \[plugins\] plugin entry .*distribution:name"):
        parse_settings({"plugins": {"allow": [entry]}}, "<test>", {})


def test_a_malformed_plugin_entry_in_the_environment_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="PROVMW_BLOCKED_PLUGINS: plugin entry 'a:b:c'"):
        PluginPolicy().with_environment({"PROVMW_BLOCKED_PLUGINS": "ok, a:b:c"})


def plugin(hook: str, answer: object) -> object:
    """A plugin object whose ``hook`` returns ``answer``."""

    def implementation(*args: Any) -> object:
        return answer

    implementation.__name__ = hook
    return type("Junk", (), {hook: staticmethod(hookimpl(implementation))})()


class Nameless:
    priority = 1

    async def handle(self, *args: Any) -> None: ...


@pytest.mark.parametrize("answer", [42, "stamp", {"name": "stamp"}, [Nameless()], [object()]])
def test_garbage_from_the_middleware_hook_names_the_plugin(builtin_only: PluginHost, answer: object) -> None:
    builtin_only.register(plugin("provmw_middleware", answer), "junk")
    with pytest.raises(PluginError, match="plugin 'junk' returned from provmw_middleware"):
        builtin_only.collect_middleware(Settings(), State())


@pytest.mark.parametrize("answer", [[object()], [type("NoName", (), {"chat": print})()], 7])
def test_garbage_from_the_providers_hook_names_the_plugin(builtin_only: PluginHost, answer: object) -> None:
    builtin_only.register(plugin("provmw_providers", answer), "junk")
    with pytest.raises(PluginError, match="plugin 'junk' returned from provmw_providers"):
        builtin_only.collect_providers()


def test_a_state_backend_missing_methods_names_the_plugin_and_the_methods(builtin_only: PluginHost) -> None:
    builtin_only.register(plugin("provmw_state_backend", type("Half", (), {"cache_store": print})()), "junk")
    settings = Settings(state=StateSettings("mem://x"))
    with pytest.raises(PluginError, match="plugin 'junk' .* not a state backend: budget_store, breaker_store"):
        builtin_only.collect_state(settings)


def test_a_usage_store_missing_methods_names_the_plugin(builtin_only: PluginHost) -> None:
    builtin_only.register(plugin("provmw_usage_store", object()), "junk")
    settings = Settings(middleware={"usage": {"store": "mem://ledger"}})
    with pytest.raises(PluginError, match="'junk' returned from provmw_usage_store a value of type object .*write"):
        builtin_only.collect_ledger(settings)
