"""One SQLite file, opened lazily in WAL mode with ``synchronous=FULL``, used from one thread.

Every statement runs on a single worker thread, so the event loop never blocks on disk
and the connection is never shared between threads. A transaction that commits has
reached the disk (FULL), so a record acknowledged after ``run`` returns survives a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

__all__ = ["SqliteDatabase", "transaction"]

T = TypeVar("T")


@contextlib.contextmanager
def transaction(connection: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any error."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield connection
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


class SqliteDatabase:
    """A lazily opened SQLite connection with its schema, used from one worker thread."""

    def __init__(self, path: str | Path, schema: str, *, busy_timeout_s: float = 5.0) -> None:
        self.path = Path(path)
        self._schema = schema
        self._busy_timeout_s = busy_timeout_s
        self._connection: sqlite3.Connection | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"provmw-sqlite-{self.path.name}")

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work(connection)`` on the database's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._call, work)

    def run_sync(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work(connection)`` from synchronous code (the CLI), on the same thread."""
        return self._executor.submit(self._call, work).result()

    def close(self) -> None:
        """Close the connection and stop the thread (a database never used has neither)."""
        if self._connection is not None:
            self._executor.submit(self._close).result()
        self._executor.shutdown()

    def _call(self, work: Callable[[sqlite3.Connection], T]) -> T:
        if self._connection is None:
            self._connection = self._open()
        return work(self._connection)

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=self._busy_timeout_s, isolation_level=None)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            connection.executescript(self._schema)
        except sqlite3.Error:
            connection.close()
            raise
        return connection

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
