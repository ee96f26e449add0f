"""MkDocs hooks: the README and the ADRs become pages, and the configuration reference is generated.

The README (the quick start) and the ADRs stay where contributors write them and are added to
the site as they are, the ADRs under "Decisions" in file order, so a new ADR needs no edit
here. The configuration reference and the list of per-call controls are rendered from the
code (``gen_settings``) where a page holds their marker.
"""

from __future__ import annotations

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


def on_page_markdown(markdown: str, page: Page, **_: Any) -> str:
    for marker, generate in GENERATED.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown
