from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from provmw.errors import ConfigurationError, PluginLoadError
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import Settings


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
    contributed = {c.middleware.name: c.plugin for c in host.collect_middleware(Settings())}
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
    assert set(builtin_only.collect_providers()) == {"openai", "anthropic"}


def test_disabled_middleware_section_drops_the_middleware(site: Path) -> None:
    host = PluginHost(PluginPolicy(allow=("stamp",)), environ={}).load()
    settings = Settings(middleware={"stamp": {"enabled": False}})
    assert "stamp" not in [c.middleware.name for c in host.collect_middleware(settings)]


def test_section_for_unknown_middleware_is_an_error_with_a_hint(site: Path) -> None:
    host = PluginHost(PluginPolicy(allow=("stamp",)), environ={}).load()
    with pytest.raises(ConfigurationError, match="did you mean 'stamp'"):
        host.collect_middleware(Settings(middleware={"stmp": {}}))


def test_discovery_order_is_deterministic(site: Path) -> None:
    first = [p.name for p in PluginHost(environ={}).load(strict=False).plugins]
    second = [p.name for p in PluginHost(environ={}).load(strict=False).plugins]
    assert first == second
    assert first[0] == "provmw"
