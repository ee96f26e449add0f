"""provmw-postgres: the usage ledger of a whole fleet in one PostgreSQL table.

Install it and name the database in the usage section; every host writes there, and
``provmw usage`` on any host sums them all in SQL::

    [middleware.usage]
    store = "postgresql://provmw@db.internal/billing"   # or postgres://; a password may be in
                                                       # the URL, PGPASSWORD or ~/.pgpass
    table = "provmw_usage"          # created if missing
    schema = "public"               # created if missing
    connect_timeout_s = 5
    statement_timeout_s = 30        # the server ends a statement running longer
    write_timeout_s = 5             # a write unanswered this long (a silent server) counts as an
                                    # outage: its records spill, calls go on

The section's other keys (``failure_policy``, ``max_journal_records``) keep their meaning:
when PostgreSQL is down, the journal keeps the records and the core's rules apply.

It also keeps the gateway's virtual keys for a fleet (``provmw_postgres.keys``)::

    provmw serve --keys postgresql://provmw@db.internal/ops     # every host: one key store
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import provmw
from provmw.settings import options_from

if TYPE_CHECKING:
    from provmw_postgres.keys import PostgresKeyOptions, PostgresKeyStore, PostgresKeysUnavailableError
    from provmw_postgres.store import PostgresOptions, PostgresUnavailableError, PostgresUsageStore

__all__ = ["SCHEMES", "PostgresKeyOptions", "PostgresKeyStore", "PostgresKeysUnavailableError", "PostgresOptions",
           "PostgresUnavailableError", "PostgresUsageStore", "provmw_key_schemes", "provmw_key_store",
           "provmw_usage_schemes", "provmw_usage_store"]

SCHEMES = ("postgresql", "postgres")


@provmw.hookimpl
def provmw_usage_store(url: str, options: Mapping[str, Any]) -> PostgresUsageStore | None:
    """The PostgreSQL ledger when ``[middleware.usage] store`` is a PostgreSQL URL."""
    if urlsplit(url).scheme not in SCHEMES:
        return None
    from provmw_postgres.store import PostgresOptions, PostgresUsageStore

    return PostgresUsageStore(url, options_from(PostgresOptions, options, "[middleware.usage]"))


@provmw.hookimpl
def provmw_usage_schemes() -> Iterable[str]:
    return SCHEMES


@provmw.hookimpl
def provmw_key_store(url: str, options: Mapping[str, Any]) -> PostgresKeyStore | None:
    """The PostgreSQL key store when ``provmw serve --keys`` (or ``provmw keys --keys``) is a PostgreSQL URL."""
    if urlsplit(url).scheme not in SCHEMES:
        return None
    from provmw_postgres.keys import PostgresKeyOptions, PostgresKeyStore

    return PostgresKeyStore(url, options_from(PostgresKeyOptions, options, "the PostgreSQL key store"))


@provmw.hookimpl
def provmw_key_schemes() -> Iterable[str]:
    return SCHEMES


def __getattr__(name: str) -> Any:
    # The driver is imported once a ledger URL names PostgreSQL, not by every process that has the plugin.
    if name in ("PostgresOptions", "PostgresUnavailableError", "PostgresUsageStore"):
        return getattr(importlib.import_module("provmw_postgres.store"), name)
    if name in ("PostgresKeyOptions", "PostgresKeyStore", "PostgresKeysUnavailableError"):
        return getattr(importlib.import_module("provmw_postgres.keys"), name)
    raise AttributeError(f"module 'provmw_postgres' has no attribute {name!r}")
