"""The documentation site says what the code does: the configuration reference covers every key the
settings accept, the controls example runs as written, and every command is documented."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from docs.gen_settings import render, sections
from docs.settings_meaning import MEANING
from provmw import settings as settings_module
from provmw._transport.reads import ReadLimits
from provmw.cli import _parser
from provmw.cli.reports import USAGE_COLUMNS
from provmw.destinations import DestinationPolicy
from provmw.middleware import BUILTINS
from provmw.stores.usage.summary import ROW_COLUMNS

ROOT = Path(__file__).resolve().parents[1]


def documented() -> dict[str, set[str]]:
    """The rendered reference, read back: each section's header and the keys in its table."""
    found: dict[str, set[str]] = {}
    for part in render().split("\n## ")[0:]:
        header = re.match(r"(?:## )?`([^`]+)`", part)
        assert header, part[:80]
        found[header.group(1)] = set(re.findall(r"^\| `(\w+)` \|", part, re.M))
    return found


def fields(cls: type) -> set[str]:
    return {f.name for f in attrs.fields(cls) if f.init}


def test_every_key_the_settings_parser_accepts_is_in_the_reference() -> None:
    reference = documented()
    assert reference["top level"] == set(settings_module._TOP_KEYS)
    assert reference["[plugins]"] == set(settings_module._PLUGIN_KEYS)
    assert reference["[configurations.NAME]"] == set(settings_module._CONFIG_KEYS)
    assert reference["[security]"] == fields(DestinationPolicy)
    assert reference["[http]"] == fields(ReadLimits)


@pytest.mark.parametrize("builtin", BUILTINS, ids=lambda b: b.name)
def test_every_option_of_every_built_in_middleware_is_in_the_reference(builtin: object) -> None:
    name, options = builtin.name, builtin.options  # type: ignore[attr-defined]
    keys = {"enabled"} | (fields(options) if attrs.has(options) else set())
    assert documented()[f"[middleware.{name}]"] == keys


def test_every_key_has_its_meaning_and_no_meaning_is_stale() -> None:
    generated = {s.ident: {k.name for k in s.keys} for s in sections()}
    assert set(MEANING) == set(generated)
    for ident, keys in generated.items():
        assert set(MEANING[ident]) - {"(section)"} == keys, ident


def test_the_controls_example_runs_as_written(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "controls.md").read_text()
    example = re.search(r"<!-- docs-test: controls.py -->\n```python\n(.*?)\n```", text, re.S)
    assert example
    (tmp_path / "controls.py").write_text(example.group(1))
    done = subprocess.run([sys.executable, "controls.py"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("echo: hi primary 1 ") and done.stdout.endswith("tool_calls\n")


def test_every_command_of_the_cli_is_in_the_operations_page() -> None:
    page = (ROOT / "docs" / "operations.md").read_text()
    documented_commands = set(re.findall(r"^\| `([a-z-]+)` \|", page, re.M))
    commands = next(a for a in _parser()._actions if a.dest == "command").choices
    assert commands is not None and documented_commands == set(commands)


def test_every_first_party_plugin_is_in_the_reference() -> None:
    page = render()
    for plugin in sorted(p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists()):
        assert f"(plugin {plugin})" in page, f"{plugin}: no section in docs/gen_settings.py"


@pytest.mark.parametrize("column", ROW_COLUMNS)
def test_every_column_of_provmw_usage_is_explained_in_the_guide(column: str) -> None:
    page = (ROOT / "docs" / "getting-started.md").read_text()
    assert f"| `{column}` | {USAGE_COLUMNS[column]} |" in page


def test_the_tool_calling_page_is_in_the_nav_and_shows_the_readmes_tested_round_trip() -> None:
    assert "- Tool calling: tools.md" in (ROOT / "mkdocs.yml").read_text()
    assert '--8<-- "README.md:tool-call"' in (ROOT / "docs" / "tools.md").read_text()
    assert "<!-- readme-test: tools.py -->" in (ROOT / "README.md").read_text().split("[start:tool-call]")[1]
