"""Budgets in a SQLite file shared by every process that opens it (ADRs 0028, 0030, 0032).

One transaction per step, on the caller's thread when the file is free (ADR 0030). At
``NORMAL`` a settle is written to this process's settle journal and committed with the next
step, or within ``settle_delay_s`` (ADR 0032); at either setting a step replays the journals
dead processes left. ``provmw.stores.budgets.blocks`` reserves many calls at once over it.

Leases expire by the store's clock, read inside each step's transaction: the clock of the host
that holds the file (every process sharing a WAL file runs on that host), never the caller's
``now``, so a process whose clock is skewed (or injected) can neither expire another's lease
early nor make its own outlive its time (ADR 0044).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import math
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from provmw.stores._sqlite import SqliteDatabase, Synchronous, transaction
from provmw.stores.budgets import (
    DIMENSIONS,
    KEEP_EXPIRED_S,
    Amounts,
    BucketId,
    BucketState,
    Charge,
    Refusal,
    check,
)
from provmw.stores.budgets.settles import Orphans, Settle, SettleJournal, merged

__all__ = ["SqliteBudgetStore"]

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS budget_buckets (
    key TEXT PRIMARY KEY, scope TEXT NOT NULL, subject TEXT NOT NULL, period TEXT NOT NULL,
    window TEXT NOT NULL, resets_at TEXT,
    cost_micro_usd INTEGER NOT NULL DEFAULT 0, tokens INTEGER NOT NULL DEFAULT 0,
    requests INTEGER NOT NULL DEFAULT 0
);
-- WITHOUT ROWID: a reservation's row and its key are one b-tree, one page less in every commit's WAL
-- frames (a file made before keeps its rowid table: the statements are the same).
CREATE TABLE IF NOT EXISTS budget_reservations (
    id TEXT NOT NULL, key TEXT NOT NULL, cost_micro_usd INTEGER NOT NULL, tokens INTEGER NOT NULL,
    requests INTEGER NOT NULL, expires_at REAL NOT NULL, PRIMARY KEY (id, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS budget_reservations_live ON budget_reservations (key, expires_at);
"""
# The bucket's spend and the sum of its live reservations in one statement (NULL spend: no bucket yet).
_HELD = (f"SELECT {', '.join(f'b.{d}' for d in DIMENSIONS)}, "
         f"{', '.join(f'COALESCE(SUM(r.{d}), 0)' for d in DIMENSIONS)} "
         "FROM (SELECT ? AS key) AS k LEFT JOIN budget_buckets AS b ON b.key = k.key "
         "LEFT JOIN budget_reservations AS r ON r.key = k.key AND r.expires_at > ?")
_PURGE_EVERY_S = 3_600.0  # expired reservations are dropped a day late, so an hour late more changes nothing


class SqliteBudgetStore:
    """Budgets in a SQLite file shared by every process that opens it (see the module's text)."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 5.0, synchronous: Synchronous = "FULL",
                 settle_delay_s: float = 0.02, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock  # the store's clock: leases go by it, whatever ``now`` callers pass
        self.db = SqliteDatabase(path, _SCHEMA, busy_timeout_s=busy_timeout_s, synchronous=synchronous)
        self._purged_at = self._replayed_at = -math.inf
        self._journal = SettleJournal(self.db.path)
        # At FULL a settle is committed (and synced) before it returns, as every step is.
        self._deferred = synchronous == "NORMAL"
        self._settle_delay_s = settle_delay_s
        # Journaled, not yet committed, oldest first, numbered: a step commits those up to the
        # number it ran, whichever thread another step runs on meanwhile.
        self._pending: list[tuple[int, Settle]] = []
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()  # the pending list and the journal, for steps on two threads
        self._flushing: asyncio.TimerHandle | None = None
        self._flushing_loop: asyncio.AbstractEventLoop | None = None
        self._flushes: set[asyncio.Task[None]] = set()

    async def reserve(self, reservation_id: str, charges: Sequence[Charge], *, now: float,
                      lease_s: float) -> Refusal | None:
        started = self._clock()  # the caller's ``now`` does not count (see the module's text)
        purge = started - self._purged_at >= _PURGE_EVERY_S
        # Dead processes' settles go in well before their reservations' leases run out.
        orphans = self._journal.orphans() if started - self._replayed_at >= lease_s / 4 else None
        if orphans is not None:
            self._replayed_at = started

        def work(connection: sqlite3.Connection) -> Refusal | None:
            refusal = None
            with transaction(connection):
                at = self._clock()  # once the file is ours: a wait for its lock does not age the leases
                applied = self._apply_pending(connection, orphans)
                if purge:
                    connection.execute("DELETE FROM budget_reservations WHERE expires_at < ?", (at - KEEP_EXPIRED_S,))
                known = []
                for charge in charges:
                    spent, reserved, exists = self._held(connection, charge.bucket.key, at)
                    refusal = check(charge, spent, reserved)
                    if refusal is not None:
                        break
                    known.append(exists)
                else:
                    for charge, exists in zip(charges, known, strict=True):
                        self._hold(connection, reservation_id, charge, exists, at + lease_s)
            self._committed(applied, orphans)
            return refusal

        try:
            refusal = await self.db.run_inline(work)
        finally:
            if orphans is not None:
                orphans.release()  # a no-op once they are committed
        if purge:
            self._purged_at = started
        return refusal

    async def renew(self, reservation_id: str, *, now: float, lease_s: float) -> None:
        def work(connection: sqlite3.Connection) -> None:
            connection.execute("UPDATE budget_reservations SET expires_at = MAX(expires_at, ?) WHERE id = ?",
                               (self._clock() + lease_s, reservation_id))

        await self.db.run(work)

    async def settle(self, reservation_id: str, actual: Amounts) -> None:
        settle = (reservation_id, actual.cost_micro_usd, actual.tokens, actual.requests)
        if self._deferred:
            try:
                with self._lock:  # the line and its entry together: a step that commits both sees both
                    self._journal.append(*settle)
                    self._pending.append((next(self._numbers), settle))
            except OSError as exc:  # no room for a line: committed now instead, as at FULL
                log.warning("budget %s: settle journal unwritable (%s); committing the settle now", self.db.path, exc)
            else:
                self._flush_within(self._settle_delay_s)
                return
        await self.db.run_inline(functools.partial(self._commit_settles, [settle], None))
        with self._lock:
            self._journal.forget(reservation_id)

    def running(self, block_id: str, total: Amounts) -> None:
        """Journal what a live block's calls have spent so far (ADR 0035): the block's settle, should this
        process die before it settles the block itself. Raises ``OSError`` (the disk is full)."""
        with self._lock:
            self._journal.running(block_id, total.cost_micro_usd, total.tokens, total.requests)

    async def settle_part(self, block_id: str, reserved: Amounts, actual: Amounts) -> None:
        """Commit one call of a live block on its own: ``actual`` spent, the block ``reserved`` smaller."""
        def work(connection: sqlite3.Connection) -> None:
            with transaction(connection):
                connection.execute(
                    "UPDATE budget_buckets SET cost_micro_usd = cost_micro_usd + ?, tokens = tokens + ?, "
                    "requests = requests + ? WHERE key IN (SELECT key FROM budget_reservations WHERE id = ?)",
                    (actual.cost_micro_usd, actual.tokens, actual.requests, block_id))
                connection.execute(
                    "UPDATE budget_reservations SET cost_micro_usd = MAX(cost_micro_usd - ?, 0), "
                    "tokens = MAX(tokens - ?, 0), requests = MAX(requests - ?, 0) WHERE id = ?",
                    (reserved.cost_micro_usd, reserved.tokens, reserved.requests, block_id))

        await self.db.run_inline(work)

    async def shrink(self, block_id: str, needs: Amounts) -> None:
        """Cut a block's reservation down to ``needs`` (what its calls in flight hold and its settled ones
        spent): a block no call enters any more gives its room left back to every process."""
        def work(connection: sqlite3.Connection) -> None:
            with transaction(connection):
                connection.execute(
                    "UPDATE budget_reservations SET cost_micro_usd = MIN(cost_micro_usd, ?), "
                    "tokens = MIN(tokens, ?), requests = MIN(requests, ?) WHERE id = ?",
                    (needs.cost_micro_usd, needs.tokens, needs.requests, block_id))

        await self.db.run_inline(work)

    async def flush(self) -> None:
        """Commit the settles this process has journaled and not yet committed."""
        if self._pending:
            await self.db.run_inline(functools.partial(self._commit_settles, [], None))

    async def states(self, *, now: float) -> list[BucketState]:
        orphans = self._journal.orphans()  # what dead processes spent counts in a report too
        try:
            if self._pending or orphans.files:  # an empty dead journal is removed too
                await self.db.run_inline(functools.partial(self._commit_settles, [], orphans))
        finally:
            orphans.release()

        def select(connection: sqlite3.Connection) -> list[BucketState]:
            at = self._clock()
            rows = connection.execute("SELECT key, scope, subject, period, window, resets_at FROM budget_buckets")
            return [BucketState(BucketId(*row[1:]), *self._held(connection, row[0], at)[:2]) for row in list(rows)]

        return await self.db.run(select)

    async def aclose(self) -> None:
        committed = False
        try:
            await self.flush()
            await asyncio.gather(*self._flushes)
            committed = not self._pending
        finally:
            if self._flushing is not None:
                self._flushing.cancel()
            # Kept (and unlocked) if a settle is still in it: the next replay's.
            self._journal.close(committed=committed)
            self.db.close()

    def _commit_settles(self, settles: list[Settle], orphans: Orphans | None, connection: sqlite3.Connection) -> None:
        with transaction(connection):
            applied = self._apply_pending(connection, orphans, settles)
        self._committed(applied, orphans)

    def _apply_pending(self, connection: sqlite3.Connection, orphans: Orphans | None,
                       extra: Sequence[Settle] = ()) -> int:
        """Run this process's pending settles (and the orphans', and ``extra``) in the open transaction;
        the number of the last pending one it ran (0: none)."""
        with self._lock:
            pending = list(self._pending)
        # The first settle of a reservation counts (a second, in the same batch, finds it gone); of a block, its total.
        settles = merged((*(orphans.settles if orphans is not None else ()), *(s for _, s in pending), *extra))
        if settles:
            connection.executemany(
                "UPDATE budget_buckets SET cost_micro_usd = cost_micro_usd + ?, tokens = tokens + ?, "
                "requests = requests + ? WHERE key IN (SELECT key FROM budget_reservations WHERE id = ?)",
                [(cost, tokens, requests, rid) for rid, cost, tokens, requests in settles])
            connection.executemany("DELETE FROM budget_reservations WHERE id = ?", [(s[0],) for s in settles])
        return pending[-1][0] if pending else 0

    def _committed(self, applied: int, orphans: Orphans | None) -> None:
        """The step that ran the pending settles up to number ``applied`` (and ``orphans``) has committed."""
        if orphans is not None:
            orphans.done()
        if not applied:
            return
        with self._lock:
            while self._pending and self._pending[0][0] <= applied:
                self._pending.pop(0)
            if not self._pending:  # every line in the journal is committed
                try:
                    self._journal.committed()
                except OSError as exc:  # the file goes on growing: the commit stands
                    log.warning("budget %s: the settle journal could not start over (%s)", self.db.path, exc)

    def _flush_within(self, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            # A timer of a loop that has closed meanwhile never fires: this loop takes over.
            stale = self._flushing_loop is not None and self._flushing_loop.is_closed()
            if self._flushing is None or stale:
                self._flushing, self._flushing_loop = loop.call_later(delay_s, self._flush_soon), loop

    def _flush_soon(self) -> None:
        self._flushing = None
        task = asyncio.get_running_loop().create_task(self._flush_later())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _flush_later(self) -> None:
        try:
            await self.flush()
        except sqlite3.Error as exc:  # journaled: the next step, or the next flush, commits them
            log.warning("budget %s: committing %d settles failed (%s); they stay journaled",
                        self.db.path, len(self._pending), exc)
            if self._pending:
                self._flush_within(self._settle_delay_s)

    @staticmethod
    def _hold(connection: sqlite3.Connection, reservation_id: str, charge: Charge, exists: bool,
              expires_at: float) -> None:
        b, a = charge.bucket, charge.amount
        if not exists:
            connection.execute("INSERT INTO budget_buckets (key, scope, subject, period, window, resets_at) "
                               "VALUES (?, ?, ?, ?, ?, ?)",
                               (b.key, b.scope, b.subject, b.period, b.window, b.resets_at))
        connection.execute("INSERT OR REPLACE INTO budget_reservations VALUES (?, ?, ?, ?, ?, ?)",
                           (reservation_id, b.key, a.cost_micro_usd, a.tokens, a.requests, expires_at))

    @staticmethod
    def _held(connection: sqlite3.Connection, key: str, now: float) -> tuple[Amounts, Amounts, bool]:
        """What the bucket has spent and holds in live reservations (one statement), and whether it exists."""
        row = connection.execute(_HELD, (key, now)).fetchone()
        known = row[0] is not None
        return Amounts(*row[:3]) if known else Amounts(), Amounts(*row[3:]), known
