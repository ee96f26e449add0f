"""Short SQLite steps on the event loop's own thread, never waiting there for a lock.

A budget step (one ``BEGIN IMMEDIATE`` transaction of two or three statements) costs
less inside SQLite than the two thread switches of a hand-off to the database's worker
(ADR 0030), and so does a batch of the usage ledger (ADR 0034): the worker thread, when it
ran them, took the GIL from the loop at every turn and held the file's lock against the
budget's steps. At ``synchronous = NORMAL`` a commit is a write to the WAL, no sync, so the
step can run where it is awaited. This connection has ``busy_timeout = 0``: a file another
connection or process has locked makes the step give the loop back and try again a little
later (as SQLite's own busy handler would, but sleeping on the loop instead of in a
thread), until ``busy_timeout_s`` has passed. It never checkpoints (a checkpoint syncs the
database file): once the WAL passes 16 MB it asks the worker thread for one, which holds
the inline steps back (they wait as for a locked file) so that it completes and the WAL
starts over instead of growing.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

__all__ = ["RESTART_BYTES", "InlineConnection"]

T = TypeVar("T")
_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
# A checkpoint syncs the database file: one when the WAL passes 16 MB (a budget's 1,200 or so
# commits, a ledger's few hundred batches), its size looked at every 64 commits.
_CHECKPOINT_BYTES = 16 * 1024 * 1024
_LOOK_EVERY = 64
RESTART_BYTES = 4 * 1024 * 1024  # a WAL that starts over is cut back to this (journal_size_limit)


def _pauses() -> Iterator[float]:
    """Seconds between two tries on a locked file: the next loop turn first, then SQLite's own steps."""
    return itertools.chain((0.0, 0.0, 0.001, 0.002, 0.005, 0.01, 0.02), itertools.repeat(0.05))


class _Busy(Exception):
    """The file (or the inline connection) is taken: try again later."""


class InlineConnection:
    """A second connection to an open database, used on whichever thread awaits a step."""

    def __init__(self, path: Path, busy_timeout_s: float, checkpoint: Callable[[], object]) -> None:
        self._path, self._busy_timeout_s, self._checkpoint = path, busy_timeout_s, checkpoint
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # one thread at a time; another finds it busy and tries again
        self._commits = 0
        self._pausing = False

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` (one transaction, safe to redo after a rollback) here, as soon as the file is free."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._busy_timeout_s
        for pause in _pauses():
            try:
                return self._try(work)
            except _Busy as exc:
                if loop.time() + pause > give_up:
                    raise sqlite3.OperationalError(str(exc)) from None
            await asyncio.sleep(pause)
        raise AssertionError("unreachable: the pauses never end")

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """While held, no step runs inline: steps wait as for a locked file."""
        self._pausing = True  # steps back off at once, or the loop's thread would starve this one
        try:
            with self._lock:
                yield
        finally:
            self._pausing = False

    def forget(self) -> sqlite3.Connection | None:
        """In a forked child: drop the parent's connection (returned, not closed) and its lock."""
        connection, self._connection = self._connection, None
        self._lock, self._pausing, self._commits = threading.Lock(), False, 0
        return connection

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def _try(self, work: Callable[[sqlite3.Connection], T]) -> T:
        if self._pausing or not self._lock.acquire(blocking=False):
            raise _Busy("database is locked (by another thread of this process, or its checkpoint)")
        try:
            connection = self._connection if self._connection is not None else self._open()
            try:
                result = work(connection)
            except sqlite3.OperationalError as exc:
                if connection.in_transaction:  # a COMMIT can meet a lock: never keep half a step
                    connection.execute("ROLLBACK")
                if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _BUSY:
                    raise _Busy(str(exc)) from None
                raise
        finally:
            self._lock.release()
        self._commits += 1
        if self._commits % _LOOK_EVERY == 0 and self._wal_bytes() >= _CHECKPOINT_BYTES:
            self._checkpoint()
        return result

    def _wal_bytes(self) -> int:
        try:
            return os.stat(f"{self._path}-wal").st_size
        except FileNotFoundError:
            return 0

    def _open(self) -> sqlite3.Connection:
        # The worker's connection has made the file WAL and written the schema before any inline step.
        connection = sqlite3.connect(self._path, timeout=0, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA wal_autocheckpoint=0")
        # A WAL that starts over is cut back to this size, so that its size says again how much it holds.
        connection.execute(f"PRAGMA journal_size_limit={RESTART_BYTES}")
        self._connection = connection
        return connection
