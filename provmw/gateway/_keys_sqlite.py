"""Virtual keys and their budgets in one SQLite file (WAL), shared by every process that opens it.

Each change is one ``BEGIN IMMEDIATE`` transaction, synced (``FULL``: a key disabled stays
disabled through a power cut); a verify is one read by primary key. Key ids are random, so
two processes creating keys at once both succeed (a clash of ids, one in 2**48, is drawn again).
"""

from __future__ import annotations

import builtins
import hmac
import json
import re
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from provmw.errors import ConfigurationError
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
from provmw.middleware.budget import BudgetLimit
from provmw.stores._sqlite import SqliteDatabase, transaction

if TYPE_CHECKING:
    from provmw._base.periods import Period

__all__ = ["SqliteKeyStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS gateway_keys (
    key_id TEXT PRIMARY KEY, key_sha256 TEXT NOT NULL, organisation TEXT NOT NULL, team TEXT, user TEXT,
    models TEXT NOT NULL, guard TEXT, disabled INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL,
    rotated_from TEXT, name TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS gateway_keys_by_organisation ON gateway_keys (organisation, created_at);
-- A key has at most one successor: two rotations of it at once, in two processes, cannot both win.
CREATE UNIQUE INDEX IF NOT EXISTS gateway_keys_successor ON gateway_keys (rotated_from)
    WHERE rotated_from IS NOT NULL;
-- Which organisation's call made each stored response (a previous_response_id is continued only by it).
CREATE TABLE IF NOT EXISTS gateway_responses (
    response_id TEXT PRIMARY KEY, organisation TEXT NOT NULL, created_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS gateway_responses_by_age ON gateway_responses (created_at);
CREATE TABLE IF NOT EXISTS gateway_budgets (
    scope TEXT NOT NULL, subject TEXT NOT NULL, period TEXT NOT NULL, max_cost_usd REAL, max_tokens INTEGER,
    max_requests INTEGER, PRIMARY KEY (scope, subject, period)
) WITHOUT ROWID;
"""
_RECORD = "key_id, organisation, team, user, models, guard, disabled, created_at, rotated_from, name"
_INSERT = f"INSERT INTO gateway_keys ({_RECORD}, key_sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_LIMIT = "scope, subject, period, max_cost_usd, max_tokens, max_requests"
_ORDER = "CASE scope WHEN 'key' THEN 0 WHEN 'team' THEN 1 WHEN 'user' THEN 2 ELSE 3 END, period"
# Compared against when the key id is unknown, so an unknown key costs what a wrong one does.
_NO_DIGEST = "0" * 64
_DRAWS = 8
_KEY_ID = re.compile(r"[0-9a-f]{12}")


def _record(row: tuple[object, ...]) -> KeyRecord:
    key_id, organisation, team, user, models, guard, disabled, created_at, rotated_from, name = row
    return KeyRecord(key_id=key_id, organisation=organisation, team=team, user=user,  # type: ignore[arg-type]
                     models=tuple(json.loads(str(models))), guard=guard, disabled=bool(disabled),  # type: ignore[arg-type]
                     created_at=created_at, rotated_from=rotated_from, name=name)  # type: ignore[arg-type]


def _row(record: KeyRecord, digest: str) -> tuple[object, ...]:
    return (record.key_id, record.organisation, record.team, record.user, json.dumps(list(record.models)),
            record.guard, int(record.disabled), record.created_at, record.rotated_from, record.name, digest)


def _one(connection: sqlite3.Connection, key_id: str) -> KeyRecord | None:
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        return None  # no key has this id (one SQLite could not even encode: a lone surrogate)
    row = connection.execute(f"SELECT {_RECORD} FROM gateway_keys WHERE key_id = ?", (key_id,)).fetchone()
    return None if row is None else _record(row)


def _existing(connection: sqlite3.Connection, key_id: str) -> KeyRecord:
    found = _one(connection, key_id)
    if found is None:
        raise ConfigurationError(f"no virtual key {key_id!r} in this key store")
    return found


def _not_rotated(connection: sqlite3.Connection, key_id: str, act: str) -> None:
    successor = connection.execute("SELECT key_id FROM gateway_keys WHERE rotated_from = ?", (key_id,)).fetchone()
    if successor is not None:
        raise ConfigurationError(f"virtual key {key_id!r} was rotated already, to {successor[0]!r}: {act} that one")


class SqliteKeyStore:
    """Virtual keys in a SQLite file (see the module's text); implements ``KeyStore``."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.db = SqliteDatabase(path, _SCHEMA, busy_timeout_s=busy_timeout_s, synchronous="FULL")
        self._clock = clock

    def __repr__(self) -> str:
        return f"SqliteKeyStore({str(self.db.path)!r})"

    async def create(self, organisation: str, *, team: str | None = None, user: str | None = None,
                     models: Iterable[str] = (), guard: str | None = None, name: str = "") -> tuple[str, KeyRecord]:
        placeholder = KeyRecord(key_id="0" * 12, organisation=organisation, team=team, user=user, models=models,
                                guard=guard, name=name)  # checked here, before the file is touched
        return await self.db.run(lambda connection: self._insert(connection, placeholder))

    def _insert(self, connection: sqlite3.Connection, template: KeyRecord) -> tuple[str, KeyRecord]:
        """Insert a fresh key like ``template`` (inside the caller's transaction or its own)."""
        for _ in range(_DRAWS):
            key_id, whole = new_key()
            record = attrs.evolve(template, key_id=key_id, created_at=self._clock())
            try:
                connection.execute(_INSERT, _row(record, key_digest(whole)))
            except sqlite3.IntegrityError:
                if _one(connection, key_id) is None:  # not a clash of ids: a successor already there
                    raise
                continue
            return whole, record
        raise ConfigurationError(f"no free key id in {_DRAWS} draws: is the key store's file sound?")

    async def verify(self, presented: str) -> KeyRecord | None:
        key_id = key_id_of(presented)
        if key_id is None:
            return None  # malformed: the store is not read

        def read(connection: sqlite3.Connection) -> KeyRecord | None:
            query = f"SELECT {_RECORD}, key_sha256 FROM gateway_keys WHERE key_id = ?"
            row = connection.execute(query, (key_id,)).fetchone()
            stored = _NO_DIGEST if row is None else str(row[-1])
            matches = hmac.compare_digest(stored, key_digest(presented))
            return _record(row[:-1]) if row is not None and matches else None

        return await self.db.run(read)

    async def get(self, key_id: str) -> KeyRecord | None:
        return await self.db.run(lambda connection: _one(connection, key_id))

    async def list(self, organisation: str | None = None) -> builtins.list[KeyRecord]:
        def read(connection: sqlite3.Connection) -> builtins.list[KeyRecord]:
            where, values = ("WHERE organisation = ?", (organisation,)) if organisation is not None else ("", ())
            rows = connection.execute(f"SELECT {_RECORD} FROM gateway_keys {where} ORDER BY created_at, key_id",
                                      values)
            return [_record(row) for row in rows]

        return await self.db.run(read)

    async def disable(self, key_id: str) -> KeyRecord:
        def write(connection: sqlite3.Connection) -> KeyRecord:
            with transaction(connection):
                record = _existing(connection, key_id)
                connection.execute("UPDATE gateway_keys SET disabled = 1 WHERE key_id = ?", (key_id,))
            return attrs.evolve(record, disabled=True)

        return await self.db.run(write)

    async def rotate(self, key_id: str) -> tuple[str, KeyRecord]:
        def write(connection: sqlite3.Connection) -> tuple[str, KeyRecord]:
            with transaction(connection):
                old = _existing(connection, key_id)
                _not_rotated(connection, key_id, "rotate")
                whole, new = self._insert(connection, attrs.evolve(old, disabled=False, rotated_from=key_id))
                connection.execute("UPDATE gateway_keys SET disabled = 1 WHERE key_id = ?", (key_id,))
                connection.execute(f"INSERT INTO gateway_budgets ({_LIMIT}) SELECT scope, ?, period, max_cost_usd, "
                                   "max_tokens, max_requests FROM gateway_budgets WHERE scope = 'key' AND subject = ?",
                                   (new.key_id, key_id))
            return whole, new

        return await self.db.run(write)

    async def set_budget(self, scope: KeyScope, subject: str, period: Period, *, max_cost_usd: float | None = None,
                         max_tokens: int | None = None, max_requests: int | None = None) -> BudgetLimit | None:
        maxima = (max_cost_usd, max_tokens, max_requests)
        budget_owner(scope, subject, period)
        limit = None if maxima == (None, None, None) else budget_limit(
            scope, subject, period, max_cost_usd=max_cost_usd, max_tokens=max_tokens, max_requests=max_requests)

        def write(connection: sqlite3.Connection) -> None:
            with transaction(connection):
                if scope == "key":  # a rotated key's budget would bind nothing: its successor is the one in use
                    _existing(connection, subject)
                    _not_rotated(connection, subject, "budget")
                connection.execute("DELETE FROM gateway_budgets WHERE scope = ? AND subject = ? AND period = ?",
                                   (scope, subject, period))
                if limit is not None:
                    connection.execute(f"INSERT INTO gateway_budgets ({_LIMIT}) VALUES (?, ?, ?, ?, ?, ?)",
                                       (scope, subject, period, *maxima))

        await self.db.run(write)
        return limit

    async def budgets_for(self, record: KeyRecord) -> tuple[BudgetLimit, ...]:
        def read(connection: sqlite3.Connection) -> tuple[BudgetLimit, ...]:
            rows = connection.execute(
                f"SELECT {_LIMIT} FROM gateway_budgets WHERE (scope = 'key' AND subject = ?) "
                "OR (scope = 'team' AND subject = ?) OR (scope = 'user' AND subject = ?) "
                f"OR (scope = 'organisation' AND subject = ?) ORDER BY {_ORDER}",
                (record.key_id, *(None if name is None else f"{record.organisation}/{name}"  # NULL matches none
                                  for name in (record.team, record.user)), record.organisation))
            return tuple(budget_limit(scope, subject, period, max_cost_usd=cost, max_tokens=tokens,
                                      max_requests=requests)
                         for scope, subject, period, cost, tokens, requests in rows)

        return await self.db.run(read)

    async def record_response(self, response_id: str, organisation: str) -> None:
        if not is_response_id(response_id):
            raise ConfigurationError(f"response_id: not a provider's response id: {response_id!r:.80}")
        check_name("organisation", organisation)
        now = self._clock()

        def write(connection: sqlite3.Connection) -> None:
            with transaction(connection):
                # The expired go with each write: by the age index, a few rows at most each time.
                connection.execute("DELETE FROM gateway_responses WHERE created_at < ?", (now - RESPONSES_KEPT_S,))
                connection.execute("INSERT INTO gateway_responses (response_id, organisation, created_at) "
                                   "VALUES (?, ?, ?) ON CONFLICT (response_id) DO NOTHING",
                                   (response_id, organisation, now))

        await self.db.run(write)

    async def response_owner(self, response_id: str) -> str | None:
        if not is_response_id(response_id):
            return None
        since = self._clock() - RESPONSES_KEPT_S

        def read(connection: sqlite3.Connection) -> str | None:
            row = connection.execute("SELECT organisation FROM gateway_responses WHERE response_id = ? AND "
                                     "created_at >= ?", (response_id, since)).fetchone()
            return None if row is None else str(row[0])

        return await self.db.run(read)

    async def aclose(self) -> None:
        self.db.close()
