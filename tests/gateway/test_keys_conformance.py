"""SqliteKeyStore passes the key store contract (provmw.gateway.conformance)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provmw.gateway import SqliteKeyStore
from provmw.gateway.conformance import KeyStoreConformance


class TestSqliteKeyStore(KeyStoreConformance):
    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.folder = tmp_path

    async def open_store(self, name: str) -> SqliteKeyStore:
        return SqliteKeyStore(self.folder / f"{name}.sqlite3")
