"""The usage ledger: one record per attempt that reached a provider, and one per cache hit.

A record's key is ``(call_id, attempt)``, the call id being provmw's own per logical call
(a caller may reuse a correlation id; it stays a column); writing the same key again
changes nothing, so a replayed batch never counts twice. Cache hits use attempt 0.

A ledger file written by provmw 0.1.0 (keyed by correlation id, without the call id and
the newer token columns) is migrated in place the first time it is opened: its rows are
kept, each old correlation id standing in as the call id, the new counts at 0. One written
before the ``key_id`` and ``team`` columns gains them, empty (NULL) in its older rows.
"""

from __future__ import annotations

import functools
import operator
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

import attrs

from provmw.errors import ConfigurationError, UsageLedgerUnavailableError
from provmw.responses import Billed, Counts
from provmw.stores._sqlite import SqliteDatabase, Synchronous, transaction
from provmw.stores.shared import masked_url
from provmw.stores.usage.summary import Group, usage_rows

__all__ = ["Billed", "MemoryUsageStore", "billed_for", "SqliteUsageStore", "UsageRecord", "UsageStore", "is_store_url",
           "ledger_location"]



def billed_for(exc: BaseException) -> Billed:
    """Whether an attempt that ended in ``exc`` was billed: the one rule the ledger and budgets share.

    Not billed: a request that never left (ADR 0004), or an error status the provider answered
    with. Anything else (a timeout, a dropped connection, a cancelled caller, a 2xx body that
    does not parse) may have been: ``unknown``.
    """
    if getattr(exc, "never_sent", False) is True:
        return "no"
    status = getattr(exc, "status", None)
    return "no" if isinstance(status, int) and status >= 400 else "unknown"


@attrs.frozen(kw_only=True)
class UsageRecord(Counts):
    """One attempt (or cache hit) of one logical call, priced when the model is: its ``Counts``
    and who, what, when and how it ended.

    ``key_id`` and ``team`` are a gateway call's (its virtual key's public id, never the key
    itself, and its team as ``ORGANISATION/TEAM``); a direct call has neither."""

    call_id: str
    attempt: int
    correlation_id: str
    timestamp: float
    operation: str
    config_id: str
    provider: str
    model: str
    user: str | None = None
    tenant: str | None = None
    key_id: str | None = None
    team: str | None = None
    latency_s: float = 0.0
    status: Literal["ok", "error", "cache_hit"] = "ok"
    error_type: str | None = None
    billed: Billed = "yes"

    @property
    def key(self) -> tuple[str, int]:
        return (self.call_id, self.attempt)


_FIELDS = tuple(a.name for a in attrs.fields(UsageRecord))
_COUNTS = tuple(a.name for a in attrs.fields(UsageRecord) if str(a.type) == "int")
_INT64 = range(-(2**63), 2**63)


class UsageStore(Protocol):
    """Where the ledger's records go, and how ``provmw usage`` reads them back.

    ``write`` is idempotent per key (a record whose key is stored already changes nothing)
    and all-or-nothing per batch (a batch that fails stores none of its records), and it
    returns only once the records are durable. ``records(since)`` returns every record
    stamped at or after ``since`` (all with None). ``summary`` returns what
    :func:`provmw.stores.usage.summary.usage_rows` returns for those records, however the store
    computes it. ``aclose`` releases the store's resources. ``provmw.testing.UsageStoreConformance``
    checks all of it against a store.
    """

    async def write(self, records: Sequence[UsageRecord]) -> None: ...

    async def records(self, since: float | None = None) -> list[UsageRecord]: ...

    async def summary(self, group_by: Group, zone: ZoneInfo, since: float | None = None) -> list[dict[str, Any]]: ...

    async def aclose(self) -> None: ...


def is_store_url(value: object) -> bool:
    """Whether a ``store`` setting is a URL (a ledger a plugin serves) rather than "sqlite" or "memory"."""
    return isinstance(value, str) and "://" in value and bool(urlsplit(value).scheme)


def ledger_location(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """The validator of ``[middleware.usage] store``: "sqlite", "memory" or a URL."""
    if value in ("sqlite", "memory") or is_store_url(value):
        return
    shown = masked_url(value) if isinstance(value, str) else value
    raise ConfigurationError(f"{attribute.name} must be sqlite, memory or the URL of a ledger a plugin serves "
                             f"(postgresql://user@host/db); got {shown!r}")


class MemoryUsageStore:
    """Records in a dict, for tests and processes that keep no ledger on disk."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, int], UsageRecord] = {}
        self._lock = threading.Lock()

    async def write(self, records: Sequence[UsageRecord]) -> None:
        for record in records:  # refuse what a durable store refuses, before keeping any
            _check_fits(record)
        with self._lock:
            for record in records:
                self._records.setdefault(record.key, record)

    async def records(self, since: float | None = None) -> list[UsageRecord]:
        with self._lock:
            return [r for r in self._records.values() if since is None or r.timestamp >= since]

    async def summary(self, group_by: Group, zone: ZoneInfo, since: float | None = None) -> list[dict[str, Any]]:
        return usage_rows(await self.records(since), group_by, zone)

    async def aclose(self) -> None:
        return None


def _check_fits(record: UsageRecord) -> None:
    for name in _COUNTS:
        if getattr(record, name) not in _INT64:
            raise OverflowError(f"usage record {record.key}: {name}={getattr(record, name)} does not fit the "
                                "64-bit integer every durable ledger stores")


_SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
    call_id TEXT NOT NULL, attempt INTEGER NOT NULL, correlation_id TEXT NOT NULL, timestamp REAL NOT NULL,
    operation TEXT NOT NULL, config_id TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,
    user TEXT, tenant TEXT, key_id TEXT, team TEXT, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL, cache_write_5m_tokens INTEGER NOT NULL,
    cache_write_1h_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL, cost_usd REAL, latency_s REAL NOT NULL,
    status TEXT NOT NULL, error_type TEXT, billed TEXT NOT NULL,
    PRIMARY KEY (call_id, attempt)
);
CREATE INDEX IF NOT EXISTS usage_by_time ON usage (timestamp);
"""
# A power of two. sqlite3 keeps a connection's last 128 statements prepared, and a prepared INSERT
# holds about 2.4 KB of SQLite's heap a row: one statement per batch size held up to 128 sizes
# (tens of MB at batches of 50 to 200, grown a size at a time for hours); seven sizes hold 0.3 MB.
_ROWS_PER_STATEMENT = 64


def _statement_rows(rows: int) -> list[int]:
    """The rows of each INSERT for a batch of ``rows``: whole statements of ``_ROWS_PER_STATEMENT``,
    then the rest's binary digits (32, 16, ..., 1), so a connection prepares at most seven statements."""
    whole, rest = divmod(rows, _ROWS_PER_STATEMENT)
    return [_ROWS_PER_STATEMENT] * whole + [1 << bit for bit in reversed(range(rest.bit_length())) if rest >> bit & 1]


@functools.lru_cache(maxsize=8)
def _insert(rows: int) -> str:
    """One statement for ``rows`` records: one trip into SQLite per statement, not per row."""
    values = ", ".join([f"({', '.join('?' * len(_FIELDS))})"] * rows)
    return f"INSERT INTO usage ({', '.join(_FIELDS)}) VALUES {values} ON CONFLICT (call_id, attempt) DO NOTHING"


_VALUES = operator.attrgetter(*_FIELDS)  # every field is a plain value: no attrs.astuple recursion


_OLD_COLUMNS = ("correlation_id, attempt, timestamp, operation, config_id, provider, model, user, tenant, "
                "input_tokens, output_tokens, cached_input_tokens, cost_usd, latency_s, status, error_type, billed")
_FROM_0_1_0 = (f"INSERT INTO usage (call_id, cache_write_5m_tokens, cache_write_1h_tokens, reasoning_tokens, "
               f"{_OLD_COLUMNS}) SELECT correlation_id, 0, 0, 0, {_OLD_COLUMNS} FROM usage_0_1_0")


def _columns(connection: sqlite3.Connection) -> set[str]:
    return {row[1] for row in connection.execute("PRAGMA table_info(usage)")}


def _migrate(connection: sqlite3.Connection) -> None:
    """Bring an older ``usage`` table to today's schema, keeping its rows."""
    _migrate_once(connection, "call_id", _rebuild_0_1_0)
    _migrate_once(connection, "key_id", _add_principal_columns)


def _migrate_once(connection: sqlite3.Connection, column: str, step: Callable[[sqlite3.Connection], None]) -> None:
    """``step`` on an existing table that lacks ``column``, once whichever process gets there first."""
    if column in _columns(connection) or not _columns(connection):
        return
    with transaction(connection):
        if column not in _columns(connection):  # else another process migrated it while we waited
            step(connection)


def _add_principal_columns(connection: sqlite3.Connection) -> None:
    """Add ``key_id`` and ``team`` to a table made before them: older rows hold neither (NULL)."""
    connection.execute("ALTER TABLE usage ADD COLUMN key_id TEXT")
    connection.execute("ALTER TABLE usage ADD COLUMN team TEXT")


def _rebuild_0_1_0(connection: sqlite3.Connection) -> None:
    """Rebuild a 0.1.0 ``usage`` table (no ``call_id``) under today's schema, keeping its rows."""
    connection.execute("ALTER TABLE usage RENAME TO usage_0_1_0")
    connection.execute("DROP INDEX IF EXISTS usage_by_time")  # it followed the renamed table
    for statement in _SCHEMA.split(";"):
        connection.execute(statement)
    connection.execute(_FROM_0_1_0)
    connection.execute("DROP TABLE usage_0_1_0")


class SqliteUsageStore:
    """The embedded default: a table in a SQLite file (WAL); records it cannot take wait in
    ``spill_path`` (see :mod:`provmw.stores.usage.journal`)."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 5.0, synchronous: Synchronous = "NORMAL") -> None:
        self.db = SqliteDatabase(path, _SCHEMA, busy_timeout_s=busy_timeout_s, synchronous=synchronous,
                                 migrate=_migrate)
        self.spill_path = Path(f"{path}.spill")
        self.synchronous = synchronous

    async def write(self, records: Sequence[UsageRecord]) -> None:
        """Insert ``records`` in one transaction, on the calling thread at ``NORMAL`` (ADR 0034: about
        3.5 us a record, a journal's batch at most 1,000). ``UsageLedgerUnavailableError`` means the
        file cannot be written now (locked, unreadable, full); any other error comes from a record."""
        values = [value for record in records for value in _VALUES(record)]

        def insert(connection: sqlite3.Connection) -> None:
            with transaction(connection):
                start = 0
                for rows in _statement_rows(len(records)):
                    end = start + rows * len(_FIELDS)
                    connection.execute(_insert(rows), values[start:end])
                    start = end

        try:
            await self.db.run_inline(insert)
        except sqlite3.OperationalError as exc:
            raise UsageLedgerUnavailableError(f"usage ledger {self.db.path}: {exc}") from exc

    async def records(self, since: float | None = None) -> list[UsageRecord]:
        def select(connection: sqlite3.Connection) -> list[UsageRecord]:
            query = f"SELECT {', '.join(_FIELDS)} FROM usage WHERE timestamp >= ? ORDER BY timestamp, attempt"
            rows = connection.execute(query, (since if since is not None else float("-inf"),))
            return [UsageRecord(**dict(zip(_FIELDS, row, strict=True))) for row in rows]

        return await self.db.run(select)

    async def summary(self, group_by: Group, zone: ZoneInfo, since: float | None = None) -> list[dict[str, Any]]:
        # Grouped here, not in SQL: SQLite knows no time zones, and one host's ledger is small.
        return usage_rows(await self.records(since), group_by, zone)

    async def aclose(self) -> None:
        self.db.close()
