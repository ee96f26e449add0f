"""One PostgreSQL connection, opened on first use, used by one call at a time, every wait bounded here.

A server that accepted the connection and then went silent (hung, or behind a network that drops
packets) honours no timeout of its own, so connecting waits at most ``connect_timeout_s`` and a
call at most ``statement_timeout_s`` and a second (for the server's own error to come first).
Past its bound, or when the caller is cancelled, the call raises the owner's unavailable error and
the connection it waited on is never used again: it is closed in the background. A connection
that fails is dropped the same way, and the next call opens a new one. The calls that waited for
the connection meanwhile are unavailable at once: each trying in turn would wait its own bound
after the others', so the last of many requests would wait many bounds.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import psycopg
from psycopg import errors, sql

from provmw.scrubbing import masked_url

__all__ = ["Connection", "OneConnection"]

T = TypeVar("T")
Connection = psycopg.AsyncConnection[Any]

_MARGIN_S = 1.0


class OneConnection:
    """The connection of one store: ``run(work)`` runs ``work(connection)`` under a lock, bounded;
    ``prepare`` runs once on each new connection (tables made if missing)."""

    def __init__(self, url: str, *, what: str, unavailable: Callable[[str], Exception],
                 prepare: Callable[[Connection], Awaitable[None]], connect_timeout_s: float,
                 statement_timeout_s: float) -> None:
        self._url, self._unavailable, self._prepare = url, unavailable, prepare
        self._where = f"{what} at {masked_url(url)}"
        self.connect_timeout_s, self.statement_timeout_s = connect_timeout_s, statement_timeout_s
        self._connection: Connection | None = None
        self._lock = asyncio.Lock()
        self._abandoned: set[asyncio.Task[Any]] = set()  # past their bound, ending in the background
        self._failures = 0  # calls that found the database unavailable, so far

    async def run(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        """``work``'s result; a failure of the connection (not an answer about the data) is the
        owner's unavailable error, and the connection is not used again."""
        failures = self._failures
        async with self._lock:
            if self._failures != failures:
                raise self._failed("the call before this one found it unavailable")
            try:
                connection = await self._bounded(self._connected(), self.connect_timeout_s, "connecting")
                return await self._bounded(work(connection), self.statement_timeout_s + _MARGIN_S, "the statement")
            except (errors.IntegrityError, errors.DataError):
                raise  # an answer about the data, on a sound connection
            except psycopg.Error as exc:
                self._drop()
                raise self._failed(f"{type(exc).__name__}: {self._scrub(str(exc))}") from None

    async def aclose(self) -> None:
        """Close the connection, if one was ever opened, and end those given up on."""
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()
        for task in self._abandoned:
            task.cancel()
        if self._abandoned:
            await asyncio.wait(self._abandoned, timeout=self.connect_timeout_s)

    async def _connected(self) -> Connection:
        if self._connection is None or self._connection.closed:
            self._connection = await self._connect()
        return self._connection

    async def _connect(self) -> Connection:
        connection = await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, application_name="provmw",
            connect_timeout=max(2, math.ceil(self.connect_timeout_s)))
        try:
            timeout_ms = int(self.statement_timeout_s * 1000)
            await connection.execute(sql.SQL("SET statement_timeout = {}").format(sql.Literal(timeout_ms)))
            await self._prepare(connection)
        except BaseException:
            await connection.close()
            raise
        return connection

    async def _bounded(self, work: Awaitable[T], timeout_s: float, what: str) -> T:
        task = asyncio.ensure_future(work)
        try:
            await asyncio.wait((task,), timeout=timeout_s)
        finally:
            late = not task.done()  # past the bound, or the caller was cancelled
            if late:
                self._drop()
                task.cancel()
                self._keep(task)
        if late:
            raise self._failed(f"no answer to {what} within {timeout_s:g} s")
        return task.result()

    def _failed(self, why: str) -> Exception:
        """The owner's unavailable error, counted: the calls waiting for the connection fail with it."""
        self._failures += 1
        return self._unavailable(f"{self._where}: {why}")

    def _drop(self) -> None:
        """Never use the connection again; it closes in the background."""
        connection, self._connection = self._connection, None
        if connection is not None and not connection.closed:
            self._keep(asyncio.ensure_future(connection.close()))

    def _keep(self, task: asyncio.Task[Any]) -> None:
        self._abandoned.add(task)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._abandoned.discard(task)
        if not task.cancelled():
            task.exception()  # what it failed with once nobody waited: of no use now

    def _scrub(self, text: str) -> str:
        """``text`` without the URL's password (libpq may quote the connection string)."""
        parts = urlsplit(self._url)
        for password in filter(None, [parts.password, *parse_qs(parts.query).get("password", [])]):
            text = text.replace(password, "***")
        return text
