"""A full disk (``RLIMIT_FSIZE``: no file of this process may grow past a bound, no root needed)
under the ledger and its spill file: no call returns without its record, under either policy."""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from provmw.errors import UsageLedgerUnavailableError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.stores.usage import SqliteUsageStore
from provmw.testing import FakeProvider
from tests.conftest import openai_config

FULL_AT = 48 * 1024  # the disk is full once a file would grow past this


@contextlib.contextmanager
def full_disk() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    ignored = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the bound: EFBIG, not a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (FULL_AT, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, ignored)


def spilled(path: Path) -> set[str]:
    """The correlation ids in the spill file, and in replays a failure left for the next start."""
    lines = [line for spill in path.parent.glob(f"{path.name}.spill*") if not spill.name.endswith(".bad")
             for line in spill.read_text().splitlines()]
    return {json.loads(line)["correlation_id"] for line in lines}


async def recorded(path: Path) -> set[str]:
    """The correlation ids in the ledger, its spill file and its replays."""
    store = SqliteUsageStore(path)
    ids = {r.correlation_id for r in await store.records()}
    await store.aclose()
    return ids | await asyncio.to_thread(spilled, path)


async def calls_on_a_full_disk(fake: FakeProvider, host: PluginHost, path: Path,
                               policy: str) -> tuple[list[str], int, int]:
    """(correlation ids of the answers returned, calls refused, records lost) for 300 calls on a full disk."""
    settings = Settings(configurations={"oa": openai_config(fake)}, middleware={
        "usage": {"path": str(path), "failure_policy": policy, "max_journal_records": 1000},
        "retry": {"max_attempts": 1}, "circuit_breaker": {"enabled": False}})
    returned, refused = [], 0
    async with ServiceManager(settings, host=host) as manager:
        await manager.chat("warm up: the ledger's schema is written")
        with full_disk():
            for i in range(300):
                try:
                    await asyncio.wait_for(manager.chat(f"call {i} " + "x" * 200, correlation_id=f"c{i}"), 0.5)
                    returned.append(f"c{i}")
                except UsageLedgerUnavailableError:
                    refused += 1
                except TimeoutError:
                    pass  # a fail_closed answer waits for its record: the caller gave up
        journal = manager.state.usage_journal()
        await journal.recovered()
    return returned, refused, journal.lost


@pytest.mark.parametrize("policy", ["fail_closed", "fail_open"])
async def test_no_call_returns_without_a_durable_record_on_a_full_disk(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path, policy: str) -> None:
    path = tmp_path / "ledger.sqlite3"
    returned, refused, lost = await calls_on_a_full_disk(fake, builtin_only, path, policy)
    assert len(set(returned) - await recorded(path)) == lost  # whatever is missing was counted ...
    assert lost == 0 or policy == "fail_open"  # ... and only a fail_open journal past its bound loses any
    assert refused == 0 or policy == "fail_closed"
