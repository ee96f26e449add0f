"""One SQLite file, opened lazily in WAL mode, used from one thread.

Every statement runs on a single worker thread, so the event loop never blocks on disk
and the connection is never shared between threads. ``synchronous`` is per connection:
``FULL`` (the default, budgets) syncs the WAL at every commit, so a committed transaction
survives power loss; ``NORMAL`` (the usage ledger's default) writes it to the WAL without
a sync, so it survives the death of the process (kill -9) but maybe not of the machine.
A ``migrate`` step, if given, runs before the schema on every open. Short steps on the
call path may run on the caller's thread instead (``run_inline``, ``provmw.stores._inline``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal, TypeVar

from provmw.stores._inline import RESTART_BYTES, InlineConnection

__all__ = ["SqliteDatabase", "Synchronous", "transaction"]

T = TypeVar("T")
Synchronous = Literal["NORMAL", "FULL"]

log = logging.getLogger(__name__)


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

    def __init__(self, path: str | Path, schema: str, *, busy_timeout_s: float = 5.0,
                 synchronous: Synchronous = "FULL",
                 migrate: Callable[[sqlite3.Connection], None] | None = None) -> None:
        self.path = Path(path)
        self._schema = schema
        self._busy_timeout_s = busy_timeout_s
        self._synchronous = synchronous
        self._migrate = migrate
        self._connection: sqlite3.Connection | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"provmw-sqlite-{self.path.name}")
        self._inline = InlineConnection(self.path, busy_timeout_s, self._checkpoint_soon)
        _databases.add(self)

    def _forget(self) -> None:
        """In a forked child: the parent's thread is not here (a step given to it would wait for ever),
        and its connections are the parent's (SQLite forbids using one across a fork, and closing one
        here could checkpoint or delete the parent's WAL): a thread and connections of its own."""
        _abandoned.extend(c for c in (self._connection, self._inline.forget()) if c is not None)
        self._connection = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"provmw-sqlite-{self.path.name}")

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work(connection)`` on the database's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._call, work)

    async def run_inline(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work(connection)`` (one short transaction, safe to redo after a rollback) on the calling
        thread, without ever blocking it on a lock; ``FULL`` goes to the database's thread, since a sync
        would block the caller for the disk's latency (and so does the first step, which opens the file)."""
        if self._synchronous != "NORMAL" or self._connection is None:
            return await self.run(work)
        return await self._inline.run(work)

    def run_sync(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work(connection)`` from synchronous code (the CLI), on the same thread."""
        return self._executor.submit(self._call, work).result()

    def close(self) -> None:
        """Close the connection and stop the thread (a database never used has neither)."""
        if self._connection is not None:
            self._executor.submit(self._close).result()
        self._executor.shutdown()
        self._inline.close()

    def _call(self, work: Callable[[sqlite3.Connection], T]) -> T:
        if self._connection is None:
            self._connection = self._open()
        return work(self._connection)

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=self._busy_timeout_s, isolation_level=None)
        try:
            _wal(connection, self._busy_timeout_s)
            connection.execute(f"PRAGMA synchronous={self._synchronous}")
            connection.execute(f"PRAGMA journal_size_limit={RESTART_BYTES}")
            if self._migrate is not None:
                self._migrate(connection)
            connection.executescript(self._schema)
        except sqlite3.Error:
            connection.close()
            raise
        return connection

    def _checkpoint_soon(self) -> None:
        with contextlib.suppress(RuntimeError):  # closed meanwhile: closing the last connection checkpoints
            self._executor.submit(self._checkpoint)

    def _checkpoint(self) -> None:
        try:
            with self._inline.paused():
                self._call(lambda connection: connection.execute("PRAGMA wal_checkpoint(PASSIVE)"))
        except sqlite3.Error as exc:  # the next one tries again; the WAL only grows meanwhile
            log.warning("sqlite %s: background checkpoint failed: %s", self.path, exc)

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _wal(connection: sqlite3.Connection, timeout_s: float) -> None:
    """``PRAGMA journal_mode=WAL``. Turning a new file to WAL takes its exclusive lock without SQLite's
    busy handler, so processes opening one new file at once got "database is locked" at once (seen with
    12 processes creating virtual keys): retried, as the handler would, for ``timeout_s``."""
    deadline, delay_s = time.monotonic() + timeout_s, 0.001
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay_s)  # on the database's own thread, as SQLite's busy handler sleeps
        delay_s = min(delay_s * 2, 0.05)


# Every database of this process, so that a forked child opens its own (one fork hook for all,
# held weakly); the parent's connections a child inherited are kept, never closed, never used.
_databases: weakref.WeakSet[SqliteDatabase] = weakref.WeakSet()
_abandoned: list[sqlite3.Connection] = []


def _after_fork_in_child() -> None:
    for database in list(_databases):
        database._forget()


os.register_at_fork(after_in_child=_after_fork_in_child)
