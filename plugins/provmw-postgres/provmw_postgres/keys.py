"""The gateway's virtual keys in PostgreSQL: one key store for every host of a fleet (ADR 0055).

``provmw serve --keys postgresql://...`` on each host, and ``provmw keys --keys postgresql://...``
anywhere: a key disabled or a budget set on one host reaches every server within the gateway's
cache TTL. Three tables, created if missing: ``provmw_keys`` (the key id and the SHA-256 of the
whole key, never the secret), ``provmw_key_budgets`` and ``provmw_key_responses``; in the first
schema of the role's ``search_path`` (``public`` unless the role, ``PGOPTIONS`` or the URL's
``?options=-csearch_path%3Dgateway`` says otherwise), or in ``schema`` when given (created if missing).

A verify is one read by primary key and a constant-time compare of the digests (an unknown id is
compared with a dummy digest, so it costs what a wrong secret does). A rotation is one
transaction that locks the old key's row; a unique ``rotated_from`` makes sure that two rotations
at once, from two hosts, cannot both win.

One connection per store, used by one call at a time (the gateway's ``KeyCache`` keeps the store
off most requests), every wait bounded on this side (``provmw_postgres.connection``): past its
bound a call raises ``PostgresKeysUnavailableError`` (the gateway answers 503) and that
connection is never used again.
"""

from __future__ import annotations

import builtins
import hmac
import re
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs
from psycopg import errors, sql

from provmw.errors import ConfigurationError, ProvmwError
from provmw.gateway.keys import (
    RESPONSES_KEPT_S,
    KeyRecord,
    KeyScope,
    budget_limit,
    budget_owner,
    check_name,
    is_response_id,
    key_digest,
    key_id_of,
    new_key,
)
from provmw.options import number
from provmw.scrubbing import masked_url
from provmw_postgres.connection import Connection, OneConnection

if TYPE_CHECKING:
    from provmw.middleware.budget import BudgetLimit

__all__ = ["PostgresKeyOptions", "PostgresKeyStore", "PostgresKeysUnavailableError"]

_SCHEMA = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# Looked up only in this shape: text PostgreSQL cannot hold (a NUL) would be its error, not "no such key".
_KEY_ID = re.compile(r"[0-9a-f]{12}")
_DDL_LOCK = 0x70726F766D776B  # any key, so that hosts starting together create the tables once
_NO_DIGEST = "0" * 64  # compared against when the key id is unknown
_DRAWS = 8
_RECORD = 'key_id, organisation, team, "user", models, guard, disabled, created_at, rotated_from, name'
_LIMIT = "scope, subject, period, max_cost_usd, max_tokens, max_requests"
_ORDER = "CASE scope WHEN 'key' THEN 0 WHEN 'team' THEN 1 WHEN 'user' THEN 2 ELSE 3 END, period COLLATE \"C\""
_TABLES = """
CREATE TABLE IF NOT EXISTS {keys} (
    key_id text PRIMARY KEY, key_sha256 text NOT NULL, organisation text NOT NULL, team text, "user" text,
    models text[] NOT NULL, guard text, disabled boolean NOT NULL DEFAULT false,
    created_at double precision NOT NULL, rotated_from text UNIQUE, name text NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS provmw_keys_by_organisation ON {keys} (organisation, created_at);
CREATE TABLE IF NOT EXISTS {budgets} (
    scope text NOT NULL, subject text NOT NULL, period text NOT NULL, max_cost_usd double precision,
    max_tokens bigint, max_requests bigint, PRIMARY KEY (scope, subject, period)
);
CREATE TABLE IF NOT EXISTS {responses} (
    response_id text PRIMARY KEY, organisation text NOT NULL, created_at double precision NOT NULL
);
CREATE INDEX IF NOT EXISTS provmw_key_responses_by_age ON {responses} (created_at);
"""


class PostgresKeysUnavailableError(ProvmwError, ConnectionError):
    """PostgreSQL did not answer the key store (unreachable, broken connection, a timeout): the
    gateway answers 503 and asks again on the next request."""


def _schema(instance: object, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not _SCHEMA.fullmatch(value)):
        raise ConfigurationError(f"schema must be a letter or _ then up to 62 letters, digits or _; got {value!r}")


@attrs.frozen(kw_only=True)
class PostgresKeyOptions:
    """Where the key store's tables live, and how long its waits may be."""

    schema: str | None = attrs.field(default=None, validator=_schema)  # None: search_path
    connect_timeout_s: float = attrs.field(default=5.0, validator=number(gt=0))
    statement_timeout_s: float = attrs.field(default=5.0, validator=number(gt=0))


def _record(row: tuple[Any, ...]) -> KeyRecord:
    key_id, organisation, team, user, models, guard, disabled, created_at, rotated_from, name = row
    return KeyRecord(key_id=key_id, organisation=organisation, team=team, user=user, models=models, guard=guard,
                     disabled=disabled, created_at=created_at, rotated_from=rotated_from, name=name)


def _row(record: KeyRecord, digest: str) -> tuple[object, ...]:
    # The models as a list: psycopg sends a list as an array, a tuple as a record.
    return (record.key_id, record.organisation, record.team, record.user, list(record.models), record.guard,
            record.disabled, record.created_at, record.rotated_from, record.name, digest)


class PostgresKeyStore:
    """Virtual keys in PostgreSQL (see the module's text); implements ``provmw.gateway.KeyStore``."""

    def __init__(self, url: str, options: PostgresKeyOptions | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self._url, self._clock = url, clock
        self.options = options or PostgresKeyOptions()
        schema = (self.options.schema,) if self.options.schema else ()
        self._keys, self._budgets, self._responses = (
            sql.Identifier(*schema, name) for name in ("provmw_keys", "provmw_key_budgets", "provmw_key_responses"))
        self._db = OneConnection(url, what="key store", unavailable=PostgresKeysUnavailableError,
                                 prepare=self._prepare, connect_timeout_s=self.options.connect_timeout_s,
                                 statement_timeout_s=self.options.statement_timeout_s)

    def __repr__(self) -> str:
        return f"PostgresKeyStore({masked_url(self._url)!r}, schema={self.options.schema or '(search_path)'})"

    async def create(self, organisation: str, *, team: str | None = None, user: str | None = None,
                     models: Iterable[str] = (), guard: str | None = None, name: str = "") -> tuple[str, KeyRecord]:
        template = KeyRecord(key_id="0" * 12, organisation=organisation, team=team, user=user, models=models,
                             guard=guard, name=name)  # checked here, before the database is touched
        return await self._db.run(lambda connection: self._insert(connection, template))

    async def _insert(self, connection: Connection, template: KeyRecord) -> tuple[str, KeyRecord]:
        """Insert a fresh key like ``template``; a clash of ids (one in 2**48) is drawn again."""
        for _ in range(_DRAWS):
            key_id, whole = new_key()
            record = attrs.evolve(template, key_id=key_id, created_at=self._clock())
            try:
                async with connection.transaction():  # a savepoint inside the caller's transaction
                    await connection.execute(self._sql(
                        f"INSERT INTO {{keys}} ({_RECORD}, key_sha256) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, "
                        "%s, %s)"), _row(record, key_digest(whole)))
            except errors.UniqueViolation as exc:
                if exc.diag.constraint_name != "provmw_keys_pkey":
                    raise  # not a clash of ids: the old key has a successor already
                continue
            return whole, record
        raise ConfigurationError(f"no free key id in {_DRAWS} draws: is the key store's table sound?")

    async def verify(self, presented: str) -> KeyRecord | None:
        key_id = key_id_of(presented)
        if key_id is None:
            return None  # malformed: the store is not read
        row = await self._one(f"SELECT {_RECORD}, key_sha256 FROM {{keys}} WHERE key_id = %s", key_id)
        stored = _NO_DIGEST if row is None else row[-1]
        matches = hmac.compare_digest(stored, key_digest(presented))
        return _record(row[:-1]) if row is not None and matches else None

    async def get(self, key_id: str) -> KeyRecord | None:
        if not _KEY_ID.fullmatch(key_id):
            return None
        row = await self._one(f"SELECT {_RECORD} FROM {{keys}} WHERE key_id = %s", key_id)
        return None if row is None else _record(row)

    async def list(self, organisation: str | None = None) -> builtins.list[KeyRecord]:
        if organisation is not None and not organisation.isprintable():
            return []  # no key's organisation is (KeyRecord refuses it), and PostgreSQL could not compare a NUL
        where = "" if organisation is None else "WHERE organisation = %s"
        query = self._sql(f'SELECT {_RECORD} FROM {{keys}} {where} ORDER BY created_at, key_id COLLATE "C"')

        async def read(connection: Connection) -> builtins.list[KeyRecord]:
            cursor = await connection.execute(query, () if organisation is None else (organisation,))
            return [_record(row) for row in await cursor.fetchall()]

        return await self._db.run(read)

    async def disable(self, key_id: str) -> KeyRecord:
        _known_shape(key_id)
        query = self._sql(f"UPDATE {{keys}} SET disabled = true WHERE key_id = %s RETURNING {_RECORD}")

        async def write(connection: Connection) -> KeyRecord:
            row = await (await connection.execute(query, (key_id,))).fetchone()
            if row is None:
                raise _unknown(key_id)
            return _record(row)

        return await self._db.run(write)

    async def rotate(self, key_id: str) -> tuple[str, KeyRecord]:
        _known_shape(key_id)

        async def write(connection: Connection) -> tuple[str, KeyRecord]:
            async with connection.transaction():
                # Locked: a second rotation waits here, then finds the successor.
                found = await connection.execute(self._sql(
                    f"SELECT {_RECORD} FROM {{keys}} WHERE key_id = %s FOR UPDATE"), (key_id,))
                row = await found.fetchone()
                if row is None:
                    raise _unknown(key_id)
                await self._not_rotated(connection, key_id, "rotate")
                whole, new = await self._insert(connection, attrs.evolve(_record(row), disabled=False,
                                                                         rotated_from=key_id))
                await connection.execute(self._sql("UPDATE {keys} SET disabled = true WHERE key_id = %s"), (key_id,))
                await connection.execute(self._sql(
                    f"INSERT INTO {{budgets}} ({_LIMIT}) SELECT scope, %s, period, max_cost_usd, max_tokens, "
                    "max_requests FROM {budgets} WHERE scope = 'key' AND subject = %s"), (new.key_id, key_id))
            return whole, new

        try:
            return await self._db.run(write)
        except errors.UniqueViolation:  # another host's rotation committed between our read and our insert
            raise ConfigurationError(f"virtual key {key_id!r} was rotated already: rotate its successor") from None

    async def set_budget(self, scope: KeyScope, subject: str, period: str, *, max_cost_usd: float | None = None,
                         max_tokens: int | None = None, max_requests: int | None = None) -> BudgetLimit | None:
        maxima = (max_cost_usd, max_tokens, max_requests)
        budget_owner(scope, subject, period)
        if scope == "key":
            _known_shape(subject)
        limit = None if maxima == (None, None, None) else budget_limit(
            scope, subject, period, max_cost_usd=max_cost_usd, max_tokens=max_tokens, max_requests=max_requests)
        remove = self._sql("DELETE FROM {budgets} WHERE scope = %s AND subject = %s AND period = %s")
        upsert = self._sql(f"INSERT INTO {{budgets}} ({_LIMIT}) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT "
                           "(scope, subject, period) DO UPDATE SET max_cost_usd = excluded.max_cost_usd, "
                           "max_tokens = excluded.max_tokens, max_requests = excluded.max_requests")

        async def write(connection: Connection) -> None:
            async with connection.transaction():
                if scope == "key":  # a rotated key's budget would bind nothing: its successor is the one in use
                    if await self._get_in(connection, subject) is None:
                        raise _unknown(subject)
                    await self._not_rotated(connection, subject, "budget")
                if limit is None:
                    await connection.execute(remove, (scope, subject, period))
                else:
                    await connection.execute(upsert, (scope, subject, period, *maxima))

        await self._db.run(write)
        return limit

    async def _not_rotated(self, connection: Connection, key_id: str, act: str) -> None:
        query = self._sql("SELECT key_id FROM {keys} WHERE rotated_from = %s")
        row = await (await connection.execute(query, (key_id,))).fetchone()
        if row is not None:
            raise ConfigurationError(f"virtual key {key_id!r} was rotated already, to {row[0]!r}: {act} that one")

    async def budgets_for(self, record: KeyRecord) -> tuple[BudgetLimit, ...]:
        query = self._sql(
            f"SELECT {_LIMIT} FROM {{budgets}} WHERE (scope = 'key' AND subject = %s) OR (scope = 'team' AND "
            "subject = %s) OR (scope = 'user' AND subject = %s) OR (scope = 'organisation' AND subject = %s) "
            f"ORDER BY {_ORDER}")
        # A missing team or user is NULL, which equals nothing: no 'acme/None' budget matches it.
        values = (record.key_id, *(None if name is None else f"{record.organisation}/{name}"
                                   for name in (record.team, record.user)), record.organisation)

        async def read(connection: Connection) -> tuple[BudgetLimit, ...]:
            rows = await (await connection.execute(query, values)).fetchall()
            return tuple(budget_limit(scope, subject, period, max_cost_usd=cost, max_tokens=tokens,
                                      max_requests=requests) for scope, subject, period, cost, tokens, requests in rows)

        return await self._db.run(read)

    async def record_response(self, response_id: str, organisation: str) -> None:
        if not is_response_id(response_id):
            raise ConfigurationError(f"response_id: not a provider's response id: {response_id!r:.80}")
        check_name("organisation", organisation)
        now = self._clock()

        async def write(connection: Connection) -> None:
            async with connection.transaction():
                # The expired go with each write: by the age index, a few rows at most each time.
                await connection.execute(self._sql("DELETE FROM {responses} WHERE created_at < %s"),
                                         (now - RESPONSES_KEPT_S,))
                await connection.execute(self._sql(
                    "INSERT INTO {responses} (response_id, organisation, created_at) VALUES (%s, %s, %s) "
                    "ON CONFLICT (response_id) DO NOTHING"), (response_id, organisation, now))

        await self._db.run(write)

    async def response_owner(self, response_id: str) -> str | None:
        if not is_response_id(response_id):
            return None
        row = await self._one("SELECT organisation FROM {responses} WHERE response_id = %s AND created_at >= %s",
                              response_id, self._clock() - RESPONSES_KEPT_S)
        return None if row is None else str(row[0])

    async def aclose(self) -> None:
        await self._db.aclose()

    def _sql(self, text: str) -> sql.Composed:
        return sql.SQL(text).format(keys=self._keys, budgets=self._budgets, responses=self._responses)

    async def _one(self, query: str, *values: object) -> tuple[Any, ...] | None:
        statement = self._sql(query)

        async def read(connection: Connection) -> tuple[Any, ...] | None:
            return await (await connection.execute(statement, values)).fetchone()

        return await self._db.run(read)

    async def _get_in(self, connection: Connection, key_id: str) -> KeyRecord | None:
        row = await (await connection.execute(self._sql(f"SELECT {_RECORD} FROM {{keys}} WHERE key_id = %s"),
                                              (key_id,))).fetchone()
        return None if row is None else _record(row)

    async def _prepare(self, connection: Connection) -> None:
        """Make the tables if missing (once, however many hosts start together)."""
        found = await connection.execute("SELECT to_regclass(%s)", (self._responses.as_string(connection),))
        if (await found.fetchone() or (None,))[0] is not None:
            return  # made already (the last table is made last): a role without CREATE rights goes on
        async with connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
            if self.options.schema:
                await connection.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                    sql.Identifier(self.options.schema)))
            for statement in filter(str.strip, _TABLES.split(";")):
                await connection.execute(self._sql(statement))




def _known_shape(key_id: str) -> None:
    if not _KEY_ID.fullmatch(key_id):
        raise _unknown(key_id)


def _unknown(key_id: str) -> ConfigurationError:
    return ConfigurationError(f"no virtual key {key_id!r} in this key store")
