"""Where settings are found and where the embedded defaults keep their files (issue #21, item 13)."""

from __future__ import annotations

import contextlib
import io
import sqlite3
from pathlib import Path

import attrs
import pytest

from provmw import ServiceManager
from provmw._base.locations import user_data_folder
from provmw.cli import main
from provmw.errors import ConfigurationError
from provmw.middleware import BUDGET, USAGE, section_options
from provmw.plugins import PluginHost
from provmw.settings import Settings, find_settings_file, load_settings
from provmw.testing import FakeProvider
from tests.conftest import openai_config

ONE = '[configurations.a]\nprovider = "openai"\nmodel = "m"\n'


def folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_a_file_in_a_parent_folder_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "provmw.toml").write_text(ONE)
    monkeypatch.chdir(folder(tmp_path / "app" / "src"))
    assert find_settings_file(environ={}) == tmp_path / "provmw.toml"
    assert load_settings(environ={}).source == str(tmp_path / "provmw.toml")


def test_the_nearest_file_wins_and_a_pyproject_without_the_table_is_passed_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "provmw.toml").write_text(ONE)
    (folder(tmp_path / "app") / "pyproject.toml").write_text('[project]\nname = "app"\n')
    (folder(tmp_path / "app" / "pkg") / "pyproject.toml").write_text(ONE.replace("[", "[tool.provmw."))
    monkeypatch.chdir(folder(tmp_path / "app" / "pkg" / "src"))
    assert find_settings_file(environ={}) == tmp_path / "app" / "pkg" / "pyproject.toml"
    monkeypatch.chdir(tmp_path / "app")
    assert find_settings_file(environ={}) == tmp_path / "provmw.toml"


def test_the_search_stops_at_the_home_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "provmw.toml").write_text(ONE)  # above home: never read
    home = folder(tmp_path / "home")
    monkeypatch.chdir(folder(home / "project"))
    settings = load_settings(environ={"HOME": str(home)})
    assert settings.configurations == {}
    assert settings.source == (f"no settings file found; looked in {home / 'project'} and its parents up to "
                               f"{home} for provmw.toml or [tool.provmw] in pyproject.toml")


def test_an_error_without_a_file_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=rf"^no settings file found; looked in {tmp_path} for provmw.toml or "
                                                 r"\[tool.provmw\] in pyproject.toml: no default configuration"):
        load_settings(environ={"HOME": str(tmp_path)}).configuration(None)


@pytest.mark.parametrize(("platform", "environ", "expected"), [
    ("linux", {"HOME": "/h", "XDG_DATA_HOME": "/x"}, "/x/provmw"),
    ("linux", {"HOME": "/h"}, "/h/.local/share/provmw"),
    ("linux", {"HOME": "/h", "XDG_DATA_HOME": "relative"}, "/h/.local/share/provmw"),  # invalid: ignored
    ("darwin", {"HOME": "/h", "XDG_DATA_HOME": "/x"}, "/h/Library/Application Support/provmw"),
    ("win32", {"USERPROFILE": "/u", "LOCALAPPDATA": "/l"}, "/l/provmw"),
    ("win32", {"USERPROFILE": "/u"}, "/u/AppData/Local/provmw"),
])
def test_the_user_data_folder_of_each_platform(platform: str, environ: dict[str, str], expected: str) -> None:
    assert user_data_folder(environ, platform) == Path(expected)


def test_without_a_file_the_ledger_and_budgets_live_in_the_data_folder(tmp_path: Path) -> None:
    settings = load_settings(environ={"XDG_DATA_HOME": str(tmp_path / "data")})
    ledger = str(tmp_path / "data" / "provmw" / "provmw.sqlite3")
    assert section_options(settings, USAGE).path == section_options(settings, BUDGET).path == ledger


def test_a_path_in_a_file_stays_relative_to_the_file(tmp_path: Path) -> None:
    (folder(tmp_path / "conf") / "provmw.toml").write_text('[middleware.usage]\npath = "state/ledger.db"\n')
    settings = load_settings(tmp_path / "conf" / "provmw.toml", environ={"XDG_DATA_HOME": str(tmp_path / "data")})
    assert section_options(settings, USAGE).path == str(tmp_path / "conf" / "state" / "ledger.db")
    assert Settings().relative_to_file("ledger.db") == "ledger.db"  # settings built in code: the working folder


async def test_the_first_call_creates_the_data_folder_and_its_ledger(tmp_path: Path, fake: FakeProvider,
                                                                     builtin_only: PluginHost) -> None:
    settings = attrs.evolve(load_settings(), configurations={"oa": openai_config(fake)})
    async with ServiceManager(settings, host=builtin_only) as manager:
        assert not (tmp_path / "xdg-data").exists()
        await manager.chat("hi")
    with contextlib.closing(sqlite3.connect(tmp_path / "xdg-data" / "provmw" / "provmw.sqlite3")) as ledger:
        assert ledger.execute("SELECT count(*) FROM usage").fetchone() == (1,)


def test_check_says_where_the_settings_and_the_ledger_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    out = io.StringIO()
    main(["check"], out)
    assert out.getvalue().splitlines()[:2] == [
        f"settings: no settings file found; looked in {tmp_path} for provmw.toml or [tool.provmw] in pyproject.toml",
        f"usage ledger: {tmp_path / 'xdg-data' / 'provmw' / 'provmw.sqlite3'}"]
