"""Several processes sharing one key file, new to all of them: keys created at once in each all land, none
lost (the first open of a new file by several processes at once failed before _sqlite._wal); one key
rotated by all of them at once is rotated once."""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest

from provmw.errors import ConfigurationError
from provmw.gateway import KeyRecord, SqliteKeyStore

pytestmark = pytest.mark.slow  # spawned interpreters: about ten seconds together

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


def rotate_key(path: str, key_id: str, start: Barrier, results: Any) -> None:
    """In a child process: wait for the others, then rotate ``key_id``; put what happened."""
    async def rotate() -> str:
        store = SqliteKeyStore(path)
        try:
            start.wait(TIMEOUT_S)
            return (await store.rotate(key_id))[1].key_id
        except ConfigurationError:
            return "refused"
        finally:
            await store.aclose()

    results.put((key_id, asyncio.run(rotate())))


def in_processes(target: Callable[..., None], argument: Callable[[int], str], path: str) -> list[tuple[str, Any]]:
    """Run ``target(path, argument(i), barrier, queue)`` in PROCESSES spawned processes; what they put."""
    context = multiprocessing.get_context("spawn")  # a fresh interpreter each, nothing inherited
    start, results = context.Barrier(PROCESSES), context.Queue()
    workers = [context.Process(target=target, args=(path, argument(i), start, results)) for i in range(PROCESSES)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=TIMEOUT_S) for _ in workers]
    for worker in workers:
        worker.join(TIMEOUT_S)
    assert [worker.exitcode for worker in workers] == [0] * PROCESSES
    return outcomes


def test_processes_creating_keys_at_once_all_succeed(tmp_path: Path) -> None:
    path = str(tmp_path / "keys.sqlite3")
    created = dict(in_processes(create_keys, lambda i: f"org{i}", path))
    listed = [record.key_id for record in asyncio.run(_listed(path))]
    assert sorted(listed) == sorted(key for keys in created.values() for key in keys)
    assert len(listed) == PROCESSES * KEYS_EACH


def test_processes_rotating_one_key_at_once_rotate_it_once(tmp_path: Path) -> None:
    path = str(tmp_path / "keys.sqlite3")
    _, old = asyncio.run(_created(path))
    outcomes = [outcome for _, outcome in in_processes(rotate_key, lambda _: old.key_id, path)]
    winners = [outcome for outcome in outcomes if outcome != "refused"]
    assert len(winners) == 1
    listed = [(record.key_id, record.disabled) for record in asyncio.run(_listed(path))]
    assert listed == [(old.key_id, True), (winners[0], False)]


async def _created(path: str) -> tuple[str, KeyRecord]:
    store = SqliteKeyStore(path)
    try:
        return await store.create("acme")
    finally:
        await store.aclose()


async def _listed(path: str) -> list[KeyRecord]:
    store = SqliteKeyStore(path)
    try:
        return await store.list()
    finally:
        await store.aclose()
