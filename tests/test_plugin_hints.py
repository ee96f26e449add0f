"""What a user is told when a plugin fails, a switch matches nothing, or two plugins clash."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from provmw.cli import main
from provmw.errors import ConfigurationError, DuplicateMiddlewareError, PluginError, PluginLoadError
from provmw.plugins import PluginHost, PluginPolicy, hookimpl
from provmw.settings import Settings
from provmw.state import State
from provmw.stores.shared import StateSettings
from tests.test_plugins import site  # noqa: F401  (the fixture: a good and a broken plugin installed)


@pytest.fixture(autouse=True)
def _no_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("PROVMW_PLUGINS", "PROVMW_BLOCKED_PLUGINS", "PROVMW_DISABLE_PLUGIN_AUTOLOAD", "PROVMW_CONFIG"):
        monkeypatch.delenv(variable, raising=False)


def run(*argv: str) -> int:
    return main(list(argv), out=io.StringIO())


def warnings(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_a_broken_plugin_error_says_how_to_block_it(site: Path) -> None:  # noqa: F811
    with pytest.raises(PluginLoadError, match="to run without it, set PROVMW_BLOCKED_PLUGINS=broken"):
        PluginHost(PluginPolicy(), environ={}).load()


def test_stack_with_a_broken_plugin_points_to_the_block_switch_and_to_v(
        site: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert run("stack") == 2
    err = capsys.readouterr().err
    assert "PROVMW_BLOCKED_PLUGINS=broken" in err and "run with -v for the traceback" in err


def test_verbose_prints_the_plugins_traceback(site: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert run("-v", "stack") == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ImportError: no such lib" in err


def test_plugins_exits_non_zero_when_a_plugin_failed(site: Path) -> None:  # noqa: F811
    assert run("plugins") == 1


def test_plugins_exits_0_when_the_failed_plugin_is_blocked(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("PROVMW_BLOCKED_PLUGINS", "broken")
    assert run("plugins") == 0


def test_an_allowlist_typo_is_warned_naming_what_is_installed(
        site: Path, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    PluginHost(environ={"PROVMW_PLUGINS": "stmp"}).load()
    text = warnings(caplog)
    assert "allowlist entry 'stmp' (PROVMW_PLUGINS or [plugins] allow) matches no installed plugin" in text
    assert "(did you mean 'stamp'?)" in text and "stamp (from provmw-stamp)" in text


def test_a_distribution_name_in_the_blocklist_is_warned_with_the_plugin_name(
        site: Path, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    PluginHost(environ={"PROVMW_BLOCKED_PLUGINS": "provmw-broken"}).load(strict=False)
    assert "'provmw-broken' is a distribution: write its plugin's name (broken)" in warnings(caplog)


def test_switches_that_match_give_no_warning(site: Path, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    PluginHost(environ={"PROVMW_PLUGINS": "stamp", "PROVMW_BLOCKED_PLUGINS": "provmw-broken:broken"}).load()
    assert warnings(caplog) == ""


def test_a_blocked_redis_plugin_is_reported_as_blocked_not_missing() -> None:
    host = PluginHost(environ={"PROVMW_BLOCKED_PLUGINS": "redis"})
    settings = Settings(state=StateSettings("redis://127.0.0.1:6379/0", shared=("cache",)))
    blocked = r"serves redis:// state \(installed but not loaded: .*redis \(provmw-redis: blocked\)"
    with pytest.raises(ConfigurationError, match=blocked):
        host.collect_state(settings)


class Contributes:
    def __init__(self, name: str) -> None:
        self.name, self.priority = name, 123

    async def handle(self, ctx: object, config: object, next: object) -> None: ...

    @hookimpl
    def provmw_middleware(self, settings: Settings) -> list[object]:
        return [Contributes(self.name)] if self.name else [1 / 0]


def test_a_duplicate_middleware_names_both_plugins(builtin_only: PluginHost) -> None:
    builtin_only.register(Contributes("stamp"), "one")
    builtin_only.register(Contributes("stamp"), "two")
    with pytest.raises(DuplicateMiddlewareError, match="named 'stamp', from plugins 'one' and 'two'"):
        builtin_only.collect_middleware(Settings(), State())


def test_an_application_middleware_taking_a_plugin_name_names_both_sources(builtin_only: PluginHost) -> None:
    from provmw.manager import ServiceManager

    builtin_only.register(Contributes("stamp"), "stamper")
    with pytest.raises(DuplicateMiddlewareError, match="named 'stamp': one from plugin 'stamper', one from the "
                                                       r"application \(ServiceManager\(middleware="):
        ServiceManager(Settings(), host=builtin_only, middleware=[Contributes("stamp")])  # type: ignore[list-item]


def test_a_plugin_failing_in_a_hook_says_how_to_block_it(builtin_only: PluginHost) -> None:
    builtin_only.register(Contributes(""), "bad")
    with pytest.raises(PluginError, match="failed in provmw_middleware: division by zero; .*BLOCKED_PLUGINS=bad"):
        builtin_only.collect_middleware(Settings(), State())
