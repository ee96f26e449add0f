"""Where provmw looks for its settings file, and where it keeps its files when no file says.

The settings file is searched from the working folder up through its parents, as pytest and
ruff search theirs, stopping after the user's home folder or the filesystem root. With no
file, the usage ledger and budget spend go to the user's data folder (ADR 0022): never to
whatever folder the application happens to run in.
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

__all__ = ["home_folder", "not_found", "searched_folders", "settings_file_in", "user_data_folder"]


def home_folder(environ: Mapping[str, str]) -> Path:
    """The user's home: ``HOME`` (``USERPROFILE`` on Windows) from ``environ``, else the system's answer."""
    value = environ.get("HOME") or environ.get("USERPROFILE")
    return Path(value) if value else Path.home()


def searched_folders(start: Path, home: Path) -> tuple[Path, ...]:
    """``start`` and its parents, nearest first, up to ``home`` or the filesystem root."""
    folders: list[Path] = []
    for folder in (start, *start.parents):
        folders.append(folder)
        if folder == home:
            break
    return tuple(folders)


def settings_file_in(folder: Path) -> Path | None:
    """``folder``'s ``provmw.toml``, else its ``pyproject.toml`` if that has a ``[tool.provmw]`` table."""
    for candidate in (folder / "provmw.toml", folder / "pyproject.toml"):
        if candidate.is_file() and (candidate.name == "provmw.toml" or _has_tool_section(candidate)):
            return candidate
    return None


def _has_tool_section(pyproject: Path) -> bool:
    try:
        return "provmw" in tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {})
    except tomllib.TOMLDecodeError:
        return False


def not_found(folders: tuple[Path, ...]) -> str:
    """What stands for the settings file in messages when none was found: where it was looked for."""
    first, last = folders[0], folders[-1]
    where = str(first) if first == last else f"{first} and its parents up to {last}"
    return f"no settings file found; looked in {where} for provmw.toml or [tool.provmw] in pyproject.toml"


def user_data_folder(environ: Mapping[str, str], platform: str = sys.platform) -> Path:
    """provmw's folder in the user's data folder: ``$XDG_DATA_HOME/provmw`` (default
    ``~/.local/share/provmw``), ``~/Library/Application Support/provmw`` on macOS,
    ``%LOCALAPPDATA%\\provmw`` on Windows. Not created here: the first store to write does."""
    home = home_folder(environ)
    if platform == "win32":
        local = environ.get("LOCALAPPDATA")
        return (Path(local) if local else home / "AppData" / "Local") / "provmw"
    if platform == "darwin":
        return home / "Library" / "Application Support" / "provmw"
    xdg = environ.get("XDG_DATA_HOME", "")
    # The XDG specification: a relative value is invalid and is ignored.
    return (Path(xdg) if os.path.isabs(xdg) else home / ".local" / "share") / "provmw"
