"""Several processes sharing one key file, new to all of them: keys created at once in each all land, none
lost (the first open of a new file by several processes at once failed before _sqlite._wal)."""

from __future__ import annotations

import asyncio
import multiprocessing
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from provmw.gateway import SqliteKeyStore

PROCESSES = 8
KEYS_EACH = 25
TIMEOUT_S = 60.0  # a bound on a hang, not a timing assertion: a healthy run takes well under a second


def create_keys(path: str, organisation: str, start: Barrier, results: Any) -> None:
    """In a child process: wait for the others, then create keys as fast as the file lets it."""
    async def create() -> list[str]:
        store = SqliteKeyStore(path)
        try:
            start.wait(TIMEOUT_S)
            return [(await store.create(organisation))[1].key_id for _ in range(KEYS_EACH)]
        finally:
            await store.aclose()

    results.put((organisation, asyncio.run(create())))


def test_processes_creating_keys_at_once_all_succeed(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")  # a fresh interpreter each, nothing inherited
    start, results = context.Barrier(PROCESSES), context.Queue()
    path = str(tmp_path / "keys.sqlite3")
    workers = [context.Process(target=create_keys, args=(path, f"org{i}", start, results))
               for i in range(PROCESSES)]
    for worker in workers:
        worker.start()
    created = dict(results.get(timeout=TIMEOUT_S) for _ in workers)
    for worker in workers:
        worker.join(TIMEOUT_S)
    assert [worker.exitcode for worker in workers] == [0] * PROCESSES
    listed = asyncio.run(_listed(path))
    assert sorted(listed) == sorted(key for keys in created.values() for key in keys)
    assert len(listed) == PROCESSES * KEYS_EACH


async def _listed(path: str) -> list[str]:
    store = SqliteKeyStore(path)
    try:
        return [record.key_id for record in await store.list()]
    finally:
        await store.aclose()
