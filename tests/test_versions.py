from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _project(pyproject: Path) -> dict[str, object]:
    table: dict[str, object] = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    return table


def test_every_first_party_plugin_carries_provmws_version() -> None:
    # `./dev dist` ships provmw and its plugins as one release: one version, the one in the root pyproject.toml.
    version = _project(ROOT / "pyproject.toml")["version"]
    plugins = sorted((ROOT / "plugins").glob("*/pyproject.toml"))
    assert plugins
    assert {p.parent.name: _project(p)["version"] for p in plugins} == {p.parent.name: version for p in plugins}
