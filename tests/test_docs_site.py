"""The built documentation site works from disk and offline, and its search ranks the guides above the
ADRs; a plugin installed from the clone leaves a tree that `./dev lint` still passes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r'(?:href|src)="([^"]*)"')
EXTERNAL_LOAD = re.compile(r'<(?:script|img|iframe)\b[^>]*\bsrc="https?://|<link\b[^>]*\bhref="https?://')


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def search_index(site: Path) -> dict[str, Any]:
    index: dict[str, Any] = json.loads((site / "search" / "search_index.json").read_text())
    return index


def pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def test_no_page_links_to_a_folder(site: Path) -> None:
    # From disk a link to a folder opens a directory listing: every local link names a file.
    for page in pages(site):
        for link in LINK.findall(page.read_text()):
            target = link.split("#")[0].split("?")[0]
            if target and not re.match(r"[a-z]+:", target):
                assert re.search(r"\.\w+$", target), f"{page.relative_to(site)} links to {link!r}"


def test_no_page_loads_a_font_script_or_style_from_the_internet(site: Path) -> None:
    for page in pages(site):
        text = page.read_text()
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, page.relative_to(site)
        assert not EXTERNAL_LOAD.search(text), f"{page.relative_to(site)}: {EXTERNAL_LOAD.search(text)}"


def test_search_splits_a_dotted_settings_table_into_words(search_index: dict[str, Any]) -> None:
    separator = search_index["config"]["separator"]
    assert "budget" in re.split(separator, "[[middleware.budget.limits]]")


def test_search_boosts_the_reference_above_every_adr_for_budget_per_user(search_index: dict[str, Any]) -> None:
    def boosts(prefix: str) -> list[float]:
        hits = [d for d in search_index["docs"] if d["location"].startswith(prefix)
                and "budget" in (d["title"] + d["text"]).lower() and "user" in d["text"].lower()]
        assert hits, prefix
        return [d.get("boost", 1.0) for d in hits]

    assert min(boosts("reference/settings")) > 1.0 > max(boosts("adr/") + boosts("performance"))


def test_mypy_skips_the_build_folder_a_plugin_install_leaves(tmp_path: Path) -> None:
    # `pip install ./plugins/provmw-x` copies the sources into plugins/provmw-x/build/lib/: mypy must
    # not see the module twice ("Duplicate module named").
    for where in ("plugins/provmw-x", "plugins/provmw-x/build/lib"):
        (tmp_path / where / "provmw_x").mkdir(parents=True)
        (tmp_path / where / "provmw_x" / "__init__.py").write_text("VALUE: int = 1\n")
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(tmp_path / ".mypy_cache"), "plugins"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout
