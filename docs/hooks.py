"""MkDocs hooks: the README and the ADRs become pages, and the configuration reference is generated.

The README (the quick start) and the ADRs stay where contributors write them and are added to
the site as they are, the ADRs under "Decisions" in file order, so a new ADR needs no edit
here. The configuration reference and the list of per-call controls are rendered from the
code (``gen_settings``) where a page holds their marker. Search ranks the guides and the reference
above the ADRs (page boosts, carried into each page's sections after the search plugin wrote its
index: MkDocs runs hooks after plugins).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # mkdocs imports this file alone; the generator imports docs.* and provmw
from docs.gen_settings import render, render_controls  # noqa: E402

# A page holding one of these gets that part generated from the code.
GENERATED = {"<!-- settings-reference -->": render, "<!-- controls-reference -->": render_controls}

# Search ranks the how-to pages and the reference above the ADRs and the performance log: a reader
# searching "budget per user" wants the key to set, not a decision's history nor a benchmark round
# (whose title "Performance" matches "per"). Material's search reads a page's boost.
GUIDES = frozenset({"quick-start.md", "getting-started.md", "reference/settings.md", "controls.md",
                    "plugins/middleware.md", "plugins/providers.md", "operations.md", "testing.md"})
BACKGROUND = frozenset({"performance.md"})  # and every ADR
GUIDE_BOOST, BACKGROUND_BOOST = 4.0, 0.25


def _adrs() -> list[Path]:
    return sorted((ROOT / "adr").glob("[0-9][0-9][0-9][0-9]-*.md"))


def on_config(config: MkDocsConfig, **_: Any) -> MkDocsConfig:
    decisions = [f"adr/{path.name}" for path in _adrs()]
    home, *rest = config.nav or []
    config.nav = [home, {"Quick start (README)": "quick-start.md"}, *rest, {"Decisions (ADRs)": decisions}]
    return config


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    files.append(File.generated(config, "quick-start.md", abs_src_path=str(ROOT / "README.md")))
    for path in _adrs():
        files.append(File(f"adr/{path.name}", src_dir=str(ROOT), dest_dir=config.site_dir,
                          use_directory_urls=config.use_directory_urls))
    return files


def _search_boost(path: str) -> float | None:
    if path in GUIDES:
        return GUIDE_BOOST
    return BACKGROUND_BOOST if path in BACKGROUND or path.startswith("adr/") else None


def on_post_build(config: MkDocsConfig, **_: Any) -> None:
    """Give each page's sections the page's search boost: search answers with sections, and
    Material's search plugin boosts only a page's own entry."""
    path = Path(config.site_dir) / "search" / "search_index.json"
    index = json.loads(path.read_text(encoding="utf-8"))
    boosts = {doc["location"]: doc["boost"] for doc in index["docs"] if "boost" in doc}
    for doc in index["docs"]:
        page = doc["location"].partition("#")[0]
        if page in boosts:
            doc.setdefault("boost", boosts[page])
    path.write_text(json.dumps(index, separators=(",", ":")), encoding="utf-8")


def on_page_markdown(markdown: str, page: Page, **_: Any) -> str:
    boost = _search_boost(page.file.src_uri)
    if boost is not None:
        page.meta.setdefault("search", {}).setdefault("boost", boost)
    for marker, generate in GENERATED.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown
