"""The usage store's module, pinned where the per-module mutation run found it unchecked (docs/testing.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provmw.errors import ConfigurationError
from provmw.middleware.usage import UsageOptions
from provmw.stores.usage import SqliteUsageStore, billed_for, is_store_url


def test_an_error_that_says_nothing_of_sending_or_status_may_have_been_billed() -> None:
    assert billed_for(RuntimeError("the connection dropped")) == "unknown"


def test_a_path_with_a_drive_letter_is_not_a_store_url() -> None:
    assert not is_store_url("C:/ledgers/usage.sqlite3")


def test_a_ledger_location_that_is_not_a_string_is_refused_as_it_was_given() -> None:
    with pytest.raises(ConfigurationError, match="; got 5$"):
        UsageOptions(store=5)  # type: ignore[arg-type]


def test_a_refused_ledger_location_is_shown_with_its_key_masked() -> None:
    with pytest.raises(ConfigurationError) as refused:
        UsageOptions(store="ledger.db?api_key=sk-abcdefghijklmnopqrstu")
    assert str(refused.value).endswith("got 'ledger.db?api_key=***'")


async def test_a_ledger_waits_five_seconds_for_a_locked_file_by_default(tmp_path: Path) -> None:
    store = SqliteUsageStore(tmp_path / "ledger.db")
    assert await store.db.run(lambda c: c.execute("PRAGMA busy_timeout").fetchone()[0]) == 5_000
    await store.aclose()
