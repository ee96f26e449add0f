"""``--keys``: a path or ``sqlite:`` URL opens the SQLite key store, any other URL the plugin serving
its scheme (``provmw_key_store``), and a scheme nobody serves is refused naming those that are."""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from provmw.cli import main
from provmw.errors import ConfigurationError, PluginError
from provmw.gateway import SqliteKeyStore
from provmw.gateway.key_stores import key_location, open_key_store
from provmw.plugins import PluginHost, PluginPolicy, hookimpl
from provmw.settings import Settings
from provmw.stores.shared import StateSettings


class MemoKeyStore(SqliteKeyStore):
    """A key store a plugin serves for ``memo://`` (SQLite underneath), remembering its URL."""

    def __init__(self, url: str, options: Mapping[str, Any], folder: Path) -> None:
        super().__init__(folder / "memo.sqlite3")
        self.url, self.options = url, dict(options)


def host_serving(folder: Path, *, store: object = None) -> PluginHost:
    class KeyPlugin:
        @hookimpl
        def provmw_key_store(self, url: str, options: Mapping[str, Any]) -> object | None:
            if not url.startswith("memo://"):
                return None
            return store if store is not None else MemoKeyStore(url, options, folder)

        @hookimpl
        def provmw_key_schemes(self) -> Iterable[str]:
            return ("memo",)

    host = PluginHost(PluginPolicy(autoload=False))
    host.register(KeyPlugin(), "memo")
    return host


@pytest.mark.parametrize(("given", "path"), [("keys.sqlite3", "keys.sqlite3"), ("sqlite:keys.sqlite3", "keys.sqlite3"),
                                             ("sqlite:///srv/keys.sqlite3", "/srv/keys.sqlite3")])
def test_a_path_or_sqlite_url_is_a_sqlite_file(given: str, path: str) -> None:
    assert key_location(given, Settings()) == Path(path)


def test_no_location_is_the_file_beside_the_ledger() -> None:
    assert key_location(None, Settings()).name == "provmw-keys.sqlite3"  # type: ignore[union-attr]


@pytest.mark.parametrize("given", ["sqlite://host/keys.sqlite3", "sqlite:", "sqlite:keys?mode=ro"])
def test_a_sqlite_url_with_a_host_or_no_path_is_refused(given: str) -> None:
    with pytest.raises(ConfigurationError, match="sqlite:PATH"):
        key_location(given, Settings())


async def test_a_file_opens_the_sqlite_store(tmp_path: Path) -> None:
    store = open_key_store(str(tmp_path / "keys.sqlite3"), Settings(), host=host_serving(tmp_path))
    assert isinstance(store, SqliteKeyStore) and not isinstance(store, MemoKeyStore)
    await store.aclose()


async def test_a_url_opens_the_store_its_schemes_plugin_serves(tmp_path: Path) -> None:
    store = open_key_store("memo://db.internal/keys", Settings(), host=host_serving(tmp_path))
    assert isinstance(store, MemoKeyStore) and store.url == "memo://db.internal/keys"
    await store.aclose()


@pytest.mark.parametrize(("state", "options"), [("memo://state.internal", {"key_prefix": "prod"}),
                                                ("other://state.internal", {})])
async def test_a_store_of_the_shared_states_kind_takes_its_options(tmp_path: Path, state: str,
                                                                  options: dict[str, Any]) -> None:
    settings = Settings(state=StateSettings(state, options={"key_prefix": "prod"}))
    store = open_key_store("memo://db.internal/keys", settings, host=host_serving(tmp_path))
    assert isinstance(store, MemoKeyStore) and store.options == options
    await store.aclose()


def test_a_scheme_no_plugin_serves_is_refused_naming_the_served_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"--keys: no .*plugin serves nosuch:// key stores; .*: memo"):
        open_key_store("nosuch://db.internal/keys", Settings(), host=host_serving(tmp_path))


def test_a_plugin_answering_with_no_key_store_is_named(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="'memo' returned from provmw_key_store .* not a key store"):
        open_key_store("memo://db.internal/keys", Settings(), host=host_serving(tmp_path, store=object()))


def test_provmw_keys_with_a_url_no_plugin_serves_exits_2_naming_the_served_schemes(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "list", "--keys", "nosuch://db.internal/keys"], out=io.StringIO()) == 2
    assert re.search(r"no (installed|loaded) plugin serves nosuch:// key stores", capsys.readouterr().err)
