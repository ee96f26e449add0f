"""The PostgreSQL usage store: one table keyed by ``(call_id, attempt)``, shared by every host.

A batch is one transaction of ``INSERT ... ON CONFLICT (call_id, attempt) DO NOTHING``, so
a batch replayed after an unclear failure counts nothing twice, and a batch PostgreSQL
refuses stores none of its records. ``summary`` groups in SQL (the day in the report's
zone with ``AT TIME ZONE``), so ``provmw usage`` reads one row per group, not every record.
A table made before the ``key_id`` and ``team`` columns gains them (NULL in its rows) when a
store first connects: the store's role needs the right to ALTER it that once.

One connection per store, opened on first use and guarded by a lock: the journal sends
one batch at a time, so a pool would only hold idle connections. A connection that fails
is dropped and the next call opens a new one; meanwhile the store raises
``PostgresUnavailableError`` and the journal keeps its records.

Every wait is bounded on this side of the wire, since a server that accepted the connection
and then never answers (hung, or behind a network that drops packets) can honour no timeout
of its own: connecting by ``connect_timeout_s``, a write by ``write_timeout_s``, a read by
``statement_timeout_s`` (and a second for the server's own error to come first). Past its
bound a write is ``PostgresUnavailableError``: the journal spills its records and calls go
on. The connection it waited on is never used again; psycopg asks the server to cancel the
statement and closes it in the background. Should the statement have committed after all,
the replay counts nothing twice (``ON CONFLICT DO NOTHING``).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

import attrs
import psycopg
from psycopg import sql

from provmw.errors import ConfigurationError, UsageLedgerUnavailableError
from provmw.options import number
from provmw.stores.shared import masked_url
from provmw.stores.usage import UsageRecord
from provmw.stores.usage.summary import ROW_COLUMNS, Group

__all__ = ["PostgresOptions", "PostgresUnavailableError", "PostgresUsageStore"]

T = TypeVar("T")

_FIELDS = tuple(a.name for a in attrs.fields(UsageRecord))
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# Any key of the ledger's DDL, so that hosts starting together create the table once.
_DDL_LOCK = 0x70726F766D77
# A read waits this much past statement_timeout_s, so that a server that answers at all says why first.
_READ_MARGIN_S = 1.0


def _identifier(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise ConfigurationError(f"{attribute.name} must be a letter or _ then up to 62 letters, digits or _; "
                                 f"got {value!r}")


class PostgresUnavailableError(UsageLedgerUnavailableError, ConnectionError):
    """PostgreSQL could not take the write (unreachable, broken connection, a lock or a timeout,
    missing rights): the store is down, not the record; the journal spills and retries."""


@attrs.frozen(kw_only=True)
class PostgresOptions:
    """The store's own keys in ``[middleware.usage]``."""

    table: str = attrs.field(default="provmw_usage", validator=_identifier)
    schema: str = attrs.field(default="public", validator=_identifier)
    connect_timeout_s: float = attrs.field(default=5.0, validator=number(gt=0))
    statement_timeout_s: float = attrs.field(default=30.0, validator=number(gt=0))
    write_timeout_s: float = attrs.field(default=5.0, validator=number(gt=0))


_COLUMNS = """
    call_id text NOT NULL, attempt bigint NOT NULL, correlation_id text NOT NULL,
    timestamp double precision NOT NULL, operation text NOT NULL, config_id text NOT NULL,
    provider text NOT NULL, model text NOT NULL, "user" text, tenant text, key_id text, team text,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL, cached_input_tokens bigint NOT NULL, cache_write_5m_tokens bigint NOT NULL,
    cache_write_1h_tokens bigint NOT NULL, reasoning_tokens bigint NOT NULL, cost_usd double precision,
    latency_s double precision NOT NULL, status text NOT NULL, error_type text, billed text NOT NULL,
    PRIMARY KEY (call_id, attempt)
"""

# The day in the report's zone: whole seconds, since zone offsets are whole seconds and
# to_timestamp would round a fraction into the next day.
_GROUPS: dict[str, str] = {
    "day": "to_char(to_timestamp(floor(timestamp)) AT TIME ZONE %(zone)s, 'YYYY-MM-DD')",
    "configuration": "config_id",
    "model": "provider || '/' || model",
    "user": "coalesce(\"user\", '(none)')",
    "tenant": "coalesce(tenant, '(none)')",
    "key": "coalesce(key_id, '(none)')",
    "team": "coalesce(team, '(none)')",
}
# Columns added since the first release, each with its type: a table made before them gains them, NULL in its rows.
_ADDED = (("key_id", "text"), ("team", "text"))
_SUMMARY = """
    SELECT {group} AS name, count(DISTINCT call_id), count(*) FILTER (WHERE status <> 'cache_hit'),
           coalesce(sum(input_tokens), 0)::bigint, coalesce(sum(output_tokens), 0)::bigint,
           coalesce(sum(cost_usd), 0), count(*) FILTER (WHERE status = 'cache_hit'),
           count(*) FILTER (WHERE status = 'error'), count(*) FILTER (WHERE billed = 'unknown')
    FROM {table} WHERE timestamp >= %(since)s GROUP BY 1
"""


class PostgresUsageStore:
    """The ledger in a PostgreSQL table (created if missing), for every host of a fleet."""

    def __init__(self, url: str, options: PostgresOptions | None = None) -> None:
        self._url = url
        self.options = options or PostgresOptions()
        self.table = sql.Identifier(self.options.schema, self.options.table)
        self._connection: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()
        self._abandoned: set[asyncio.Task[Any]] = set()  # past their bound, ending in the background

    def __repr__(self) -> str:
        return f"PostgresUsageStore({masked_url(self._url)!r}, table={self.options.schema}.{self.options.table})"

    async def write(self, records: Sequence[UsageRecord]) -> None:
        rows = [attrs.astuple(r) for r in records]
        insert = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT (call_id, attempt) DO NOTHING").format(
            self.table, sql.SQL(", ").join(map(sql.Identifier, _FIELDS)),
            sql.SQL(", ").join(sql.Placeholder() * len(_FIELDS)))

        async def insert_all(connection: psycopg.AsyncConnection[Any]) -> None:
            async with connection.transaction(), connection.cursor() as cursor:
                await cursor.executemany(insert, rows)

        await self._run(insert_all, self.options.write_timeout_s)

    async def records(self, since: float | None = None) -> list[UsageRecord]:
        select = sql.SQL("SELECT {} FROM {} WHERE timestamp >= %s ORDER BY timestamp, attempt").format(
            sql.SQL(", ").join(map(sql.Identifier, _FIELDS)), self.table)

        async def read(connection: psycopg.AsyncConnection[Any]) -> list[UsageRecord]:
            cursor = await connection.execute(select, (_from(since),))
            return [UsageRecord(**dict(zip(_FIELDS, row, strict=True))) for row in await cursor.fetchall()]

        return await self._run(read, self._read_timeout_s)

    async def summary(self, group_by: Group, zone: ZoneInfo, since: float | None = None) -> list[dict[str, Any]]:
        if zone.key is None:
            raise ConfigurationError("the PostgreSQL ledger groups days by a named time zone; this zone has no name")
        query = sql.SQL(_SUMMARY).format(group=sql.SQL(_GROUPS[group_by]), table=self.table)

        async def read(connection: psycopg.AsyncConnection[Any]) -> list[dict[str, Any]]:
            cursor = await connection.execute(query, {"zone": zone.key, "since": _from(since)})
            # Ordered here: Python's order (code points) is not the database collation's.
            return [_row(group_by, row) for row in sorted(await cursor.fetchall(), key=lambda row: row[0])]

        return await self._run(read, self._read_timeout_s)

    async def aclose(self) -> None:
        """Close the connection, if one was ever opened, and those given up on."""
        await self._drop()
        if self._abandoned:  # cancelled again: psycopg stops asking the server and closes at once
            for task in self._abandoned:
                task.cancel()
            await asyncio.wait(self._abandoned, timeout=self.options.connect_timeout_s)

    @property
    def _read_timeout_s(self) -> float:
        return self.options.statement_timeout_s + _READ_MARGIN_S

    async def _run(self, work: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]], timeout_s: float) -> T:
        async with self._lock:
            try:
                connection = await self._connected()
                return await self._bounded(work(connection), timeout_s, "the statement")
            except psycopg.DataError:
                raise  # this batch holds a value the column refuses: the journal sets the record aside
            except psycopg.Error as exc:
                await self._drop()  # a broken connection is not used again
                raise PostgresUnavailableError(self._scrub(f"PostgreSQL ledger at {masked_url(self._url)}: "
                                                           f"{type(exc).__name__}: {exc}")) from None

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()

    async def _connected(self) -> psycopg.AsyncConnection[Any]:
        if self._connection is None or self._connection.closed:
            self._connection = await self._bounded(self._connect(), self.options.connect_timeout_s, "connecting")
        return self._connection

    async def _bounded(self, work: Awaitable[T], timeout_s: float, what: str) -> T:
        """``work``'s result, or ``PostgresUnavailableError`` once ``timeout_s`` passed without one."""
        task = asyncio.ensure_future(work)
        try:
            await asyncio.wait((task,), timeout=timeout_s)
        finally:
            late = not task.done()  # past the bound, or the caller was cancelled
            if late:
                self._abandon(task)
        if late:
            raise PostgresUnavailableError(self._scrub(
                f"PostgreSQL ledger at {masked_url(self._url)}: no answer to {what} within {timeout_s:g} s"))
        return task.result()

    def _abandon(self, task: asyncio.Task[Any]) -> None:
        """Never use the connection ``task`` waits on again, and let it end in the background."""
        self._connection = None
        task.cancel()
        self._abandoned.add(task)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._abandoned.discard(task)
        if not task.cancelled():
            task.exception()  # what it failed with once nobody waited: of no use now

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        connection = await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, application_name="provmw",
            connect_timeout=max(2, math.ceil(self.options.connect_timeout_s)))
        try:
            await self._prepare(connection)
        except BaseException:
            await connection.close()
            raise
        return connection

    async def _prepare(self, connection: psycopg.AsyncConnection[Any]) -> None:
        timeout_ms = int(self.options.statement_timeout_s * 1000)
        await connection.execute(sql.SQL("SET statement_timeout = {}").format(sql.Literal(timeout_ms)))
        found = await connection.execute("SELECT to_regclass(%s)", (self.table.as_string(connection),))
        if (await found.fetchone() or (None,))[0] is None:
            await self._create(connection)
        elif await self._missing_columns(connection):
            await self._add_columns(connection)
        # else a role with only INSERT and SELECT rights needs no CREATE nor ALTER once the table is current

    async def _create(self, connection: psycopg.AsyncConnection[Any]) -> None:
        index = sql.Identifier(f"{self.options.table}_by_time")
        async with connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
            await connection.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                sql.Identifier(self.options.schema)))
            await connection.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                self.table, sql.SQL(_COLUMNS)))
            await connection.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (timestamp)").format(
                index, self.table))

    async def _missing_columns(self, connection: psycopg.AsyncConnection[Any]) -> bool:
        found = await connection.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
            "AND column_name = ANY(%s)", (self.options.schema, self.options.table, [name for name, _ in _ADDED]))
        return (await found.fetchone() or (0,))[0] < len(_ADDED)

    async def _add_columns(self, connection: psycopg.AsyncConnection[Any]) -> None:
        """Bring a table made by an older release to today's columns (this once, the role needs ALTER)."""
        added = sql.SQL(", ").join(sql.SQL("ADD COLUMN IF NOT EXISTS {} {}").format(sql.Identifier(name), sql.SQL(kind))
                                   for name, kind in _ADDED)
        alter = sql.SQL("ALTER TABLE {} {}").format(self.table, added)
        try:
            async with connection.transaction():
                await connection.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
                await connection.execute(alter)
        except psycopg.errors.InsufficientPrivilege:
            raise PostgresUnavailableError(
                f"PostgreSQL ledger at {masked_url(self._url)}: the table predates the key_id and team columns "
                f"and this role may not add them; run once as its owner: {alter.as_string(connection)}") from None

    def _scrub(self, text: str) -> str:
        parts = urlsplit(self._url)
        passwords = [parts.password, *parse_qs(parts.query).get("password", [])]
        for password in filter(None, passwords):
            text = text.replace(password, "***")
        return text


def _from(since: float | None) -> float:
    return since if since is not None else float("-inf")


def _row(group_by: Group, row: tuple[Any, ...]) -> dict[str, Any]:
    values = dict(zip(ROW_COLUMNS, row[1:], strict=True))
    values["cost_usd"] = round(float(values["cost_usd"]), 6)
    return {group_by: row[0], **{k: v if k == "cost_usd" else int(v) for k, v in values.items()}}
