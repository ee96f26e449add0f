"""The usage store contract (``provmw.testing.UsageStoreConformance``) on the embedded stores."""

from __future__ import annotations

from pathlib import Path

import pytest

from provmw.stores.usage import MemoryUsageStore, SqliteUsageStore, UsageStore
from provmw.testing import UsageStoreConformance


class TestMemoryUsageStore(UsageStoreConformance):
    durable = False

    async def open_store(self, name: str) -> UsageStore:
        return MemoryUsageStore()


class TestSqliteUsageStore(UsageStoreConformance):
    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.folder = tmp_path

    async def open_store(self, name: str) -> UsageStore:
        return SqliteUsageStore(self.folder / f"{name}.sqlite3")
