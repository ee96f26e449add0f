from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from provmw.errors import ConfigurationError, PluginError, PluginLoadError
from provmw.plugins import PluginHost, PluginPolicy, hookimpl
from provmw.settings import Settings
from provmw.state import State, open_state
from provmw.stores.cache import MemoryCacheStore
from provmw.stores.embedded import EmbeddedState
from provmw.stores.shared import StateSettings


def install_dist(root: Path, dist: str, ep_name: str, module: str, source: str) -> None:
    """Write a real (unpacked) distribution with a `provmw` entry point onto a sys.path dir."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[provmw]\n{ep_name} = {module}\n")


GOOD = """
    import provmw

    class Stamp:
        name = "stamp"
        priority = 123

        async def handle(self, ctx, config, next):
            return await next(config)

    @provmw.hookimpl
    def provmw_middleware(settings):
        return [Stamp()]
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    install_dist(tmp_path, "provmw-stamp", "stamp", "provmw_stamp_plugin", GOOD)
    install_dist(tmp_path, "provmw-broken", "broken", "provmw_broken_plugin", "raise ImportError('no such lib')\n")
    return tmp_path


def names(host: PluginHost) -> dict[str, str]:
    return {p.name: p.status for p in host.plugins}


def test_entry_point_plugin_is_discovered_and_contributes(site: Path) -> None:
    host = PluginHost(PluginPolicy(block=("broken",)), environ={}).load()
    contributed = {c.middleware.name: c.plugin for c in host.collect_middleware(Settings(), State())}
    assert contributed["stamp"] == "stamp"


def test_broken_plugin_raises_plugin_load_error_naming_it(site: Path) -> None:
    with pytest.raises(PluginLoadError, match="'broken'.*'provmw-broken'.*no such lib"):
        PluginHost(environ={}).load()


def test_broken_plugin_is_recorded_as_failed_when_not_strict(site: Path) -> None:
    host = PluginHost(environ={}).load(strict=False)
    assert names(host)["broken"] == "failed"
    assert names(host)["stamp"] == "loaded"


def test_allowlist_from_environment(site: Path) -> None:
    host = PluginHost(environ={"PROVMW_PLUGINS": "stamp"}).load()
    assert names(host)["stamp"] == "loaded"
    assert names(host)["broken"] == "not-allowed"


def test_blocklist_from_environment(site: Path) -> None:
    host = PluginHost(environ={"PROVMW_BLOCKED_PLUGINS": "broken, stamp"}).load()
    assert names(host)["broken"] == "blocked"
    assert names(host)["stamp"] == "blocked"


def test_disable_switch_keeps_only_the_builtin_plugin(site: Path) -> None:
    host = PluginHost(environ={"PROVMW_DISABLE_PLUGIN_AUTOLOAD": "1"}).load()
    assert {p.name for p in host.plugins if p.status == "loaded"} == {"provmw"}


def test_builtin_plugin_registers_the_providers(builtin_only: PluginHost) -> None:
    assert set(builtin_only.collect_providers()) == {"openai", "anthropic", "cohere"}


def test_disabled_middleware_section_drops_the_middleware(site: Path) -> None:
    host = PluginHost(PluginPolicy(allow=("stamp",)), environ={}).load()
    settings = Settings(middleware={"stamp": {"enabled": False}})
    assert "stamp" not in [c.middleware.name for c in host.collect_middleware(settings, State())]


def test_section_for_unknown_middleware_is_an_error_with_a_hint(site: Path) -> None:
    host = PluginHost(PluginPolicy(allow=("stamp",)), environ={}).load()
    with pytest.raises(ConfigurationError, match="did you mean 'stamp'"):
        host.collect_middleware(Settings(middleware={"stmp": {}}), State())


def test_discovery_order_is_deterministic(site: Path) -> None:
    first = [p.name for p in PluginHost(environ={}).load(strict=False).plugins]
    second = [p.name for p in PluginHost(environ={}).load(strict=False).plugins]
    assert first == second
    assert first[0] == "provmw"


class Backend:
    """A state backend whose cache store the wiring tests look at; the rest is embedded."""

    def __init__(self) -> None:
        self.store = MemoryCacheStore()
        embedded = EmbeddedState()
        self.budget_store, self.breaker_store = embedded.budget_store, embedded.breaker_store
        self.rate_limiter, self.aclose = embedded.rate_limiter, embedded.aclose

    def cache_store(self) -> MemoryCacheStore:
        return self.store


def serving(scheme: str, backend: object) -> object:
    class StatePlugin:
        @hookimpl
        def provmw_state_backend(self, settings: Settings) -> object:
            assert settings.state is not None
            return backend if settings.state.scheme == scheme else None

    return StatePlugin()


STATEFUL = Settings(state=StateSettings("mem://x", shared=("cache",)),
                    middleware={"budget": {"store": "memory"}, "usage": {"store": "memory"}})


def test_the_backend_serving_the_state_url_reaches_the_middleware(builtin_only: PluginHost) -> None:
    backend = Backend()
    builtin_only.register(serving("mem", backend), "mem")
    state = open_state(STATEFUL, builtin_only.collect_state(STATEFUL))
    cache: Any = next(c.middleware for c in builtin_only.collect_middleware(STATEFUL, state)
                      if c.middleware.name == "cache")
    assert cache.store.store is backend.store  # behind the outage rule's guard


def test_a_state_url_no_plugin_serves_is_a_configuration_error(builtin_only: PluginHost) -> None:
    builtin_only.register(serving("other", Backend()), "other")
    with pytest.raises(ConfigurationError, match=r"no loaded plugin serves mem:// state \(plugin autoload is off\)"):
        builtin_only.collect_state(STATEFUL)


def test_two_plugins_serving_one_state_url_is_an_error(builtin_only: PluginHost) -> None:
    builtin_only.register(serving("mem", Backend()), "one")
    builtin_only.register(serving("mem", Backend()), "two")
    with pytest.raises(PluginError, match="'two', 'one' all serve mem:// state|'one', 'two' all serve"):
        builtin_only.collect_state(STATEFUL)


def test_without_a_state_section_no_backend_is_asked(builtin_only: PluginHost) -> None:
    builtin_only.register(serving("mem", Backend()), "mem")
    assert builtin_only.collect_state(Settings()) is None
