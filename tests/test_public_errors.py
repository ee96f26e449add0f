"""Every error a user reads about is importable from ``provmw`` itself (issue 39, item 6)."""

from __future__ import annotations

import re
from pathlib import Path

import provmw
import provmw.errors

README = Path(__file__).resolve().parent.parent / "README.md"


def tree_names() -> set[str]:
    """The classes drawn in the error tree of ``provmw.errors``' docstring."""
    return set(re.findall(r"^\s*(?:[│ ]\s*)*[├└]── (\w+)", provmw.errors.__doc__ or "", re.MULTILINE))


def test_the_tree_drawing_is_read_whole() -> None:
    # Leaves at every depth, so a tree drawn differently fails here rather than checking nothing.
    assert {"UnknownArgumentError", "FirstChunkTimeoutError", "StreamTooLargeError"} <= tree_names()
    assert len(tree_names()) >= 30


def test_every_error_the_readme_names_is_exported_by_provmw() -> None:
    named = set(re.findall(r"\b([A-Z]\w*Error)\b", README.read_text(encoding="utf-8")))
    assert named, "the README names no error: the pattern is wrong"
    assert sorted(named - set(provmw.__all__)) == []
    assert all(issubclass(getattr(provmw, name), provmw.ProvmwError) for name in named)


def test_provmw_all_holds_the_whole_error_tree() -> None:
    tree = tree_names() | {"ProvmwError"}
    assert sorted(tree - set(provmw.__all__)) == []
    assert all(getattr(provmw, name) is getattr(provmw.errors, name) for name in tree)
