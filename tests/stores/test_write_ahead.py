"""The journal's write-ahead file (ADR 0027): a call's record is durable before any commit."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path

from provmw.settings import Settings
from provmw.state import open_state
from provmw.stores.usage import SqliteUsageStore
from provmw.stores.usage.journal import UsageJournal
from provmw.stores.usage.spill import SpillFile
from provmw.stores.usage.write_ahead import WriteAheadFile
from tests.stores.test_usage_store import record


def gated() -> tuple[asyncio.Event, Callable[[float], Awaitable[None]]]:
    """A sleep that lasts until the event is set: the writer's linger, held open by the test."""
    gate = asyncio.Event()

    async def sleep(_: float) -> None:
        await gate.wait()

    return gate, sleep


def journal(path: Path, sleep: Callable[[float], Awaitable[None]]) -> UsageJournal:
    return UsageJournal(SqliteUsageStore(path), write_ahead=True, sleep=sleep)


async def test_a_durable_record_is_journaled_before_the_store_has_it(tmp_path: Path) -> None:
    gate, sleep = gated()
    ledger = journal(tmp_path / "u.db", sleep)
    assert await ledger.durable(record("a")) == "journaled"
    assert await ledger.store.records() == []
    gate.set()
    await ledger.flush()
    assert [r.call_id for r in await ledger.store.records()] == ["a"]
    await ledger.aclose()


async def test_records_that_come_while_a_batch_is_written_wait_for_the_linger_too(tmp_path: Path) -> None:
    lingers = []

    async def sleep(seconds: float) -> None:
        lingers.append(seconds)
        await asyncio.sleep(0.01)

    ledger = UsageJournal(SqliteUsageStore(tmp_path / "u.db"), write_ahead=True, sleep=sleep, linger_s=0.01)
    for i in range(100):  # one call after another, each a little while
        await ledger.durable(record(f"c{i}"))
        await asyncio.sleep(0.001)
    await ledger.flush()
    # Every batch waited for more first: a batch for each ten milliseconds or so, not one per record.
    assert ledger.commits == len(lingers) <= 30
    assert len(await ledger.store.records()) == 100
    await ledger.aclose()


async def test_a_live_process_file_is_not_replayed_by_another_journal(tmp_path: Path) -> None:
    gate, sleep = gated()
    live = journal(tmp_path / "u.db", sleep)
    await live.durable(record("a"))
    other = UsageJournal(SqliteUsageStore(tmp_path / "u.db"))
    await other.replay()
    assert await other.store.records() == []
    await other.aclose()
    gate.set()
    await live.aclose()


async def test_closing_writes_everything_and_leaves_no_file(tmp_path: Path) -> None:
    ledger = journal(tmp_path / "u.db", asyncio.sleep)
    for name in ("a", "b", "c"):
        await ledger.durable(record(name))
    await ledger.aclose()
    assert len(await SqliteUsageStore(tmp_path / "u.db").records()) == 3
    assert [name for name in os.listdir(tmp_path) if "spill" in name] == []


async def test_the_default_ledger_writes_ahead_and_a_full_one_waits_for_its_commit(tmp_path: Path) -> None:
    outcomes = []
    for synchronous in ("normal", "full"):
        usage = {"path": str(tmp_path / f"{synchronous}.db"), "synchronous": synchronous}
        state = open_state(Settings(middleware={"usage": usage}))
        outcomes.append(await state.usage_journal().durable(record("a")))
        await state.aclose()
    assert outcomes == ["journaled", "stored"]


async def test_a_fail_closed_journal_waits_for_the_store(tmp_path: Path) -> None:
    ledger = UsageJournal(SqliteUsageStore(tmp_path / "u.db"), write_ahead=True, policy="fail_closed")
    assert await ledger.durable(record("a")) == "stored"
    await ledger.aclose()


async def test_a_batch_larger_than_one_statement_is_stored_whole(tmp_path: Path) -> None:
    store = SqliteUsageStore(tmp_path / "u.db")
    await store.write([record(f"c{i}") for i in range(2_500)])
    assert len(await store.records()) == 2_500
    await store.aclose()


JOURNALED = """
    import asyncio, sys
    from provmw.stores.usage.journal import UsageJournal
    from provmw.stores.usage import SqliteUsageStore
    from tests.stores.test_usage_store import record
    async def main():
        journal = UsageJournal(SqliteUsageStore(sys.argv[1]), write_ahead=True, linger_s=3600)
        for i in range(50):
            print(await journal.durable(record(f"c{i}")), flush=True)
        await asyncio.sleep(3600)  # nothing is ever committed: the file alone must keep them
    asyncio.run(main())
"""


def test_journaled_records_survive_kill_9_with_no_commit(tmp_path: Path) -> None:
    path = tmp_path / "u.db"
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(JOURNALED), str(path)], stdout=subprocess.PIPE,
                             text=True, cwd=Path(__file__).parents[2])
    assert child.stdout is not None
    assert [child.stdout.readline().strip() for _ in range(50)] == ["journaled"] * 50
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert not path.exists() or sqlite3.connect(path).execute("SELECT count(*) FROM usage").fetchone() == (0,)
    assert asyncio.run(after_restart(path)) == {f"c{i}" for i in range(50)}


async def after_restart(path: Path) -> set[str]:
    journal = UsageJournal(SqliteUsageStore(path))
    await journal.replay()  # what the next start does first
    found = {r.call_id for r in await journal.store.records()}
    await journal.aclose()
    return found


def test_a_forked_child_appends_to_a_segment_of_its_own(tmp_path: Path) -> None:
    ahead = WriteAheadFile(SpillFile(tmp_path / "u.db.spill"))
    ahead.append(record("parent"))
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        ahead.append(record("child"))
        os._exit(0)
    os.waitpid(pid, 0)
    segments = sorted(tmp_path.glob("u.db.spill.*.replay"))
    assert sorted(len(path.read_bytes().splitlines()) for path in segments) == [1, 1]
