"""``provmw check``: every problem a first call would meet, found up front and listed at once.

Calls read a configuration's key variables only when they first use it (so a fallback that
never runs needs no key); this is the place that looks at all of them before anything runs:
the settings file, every configuration's ``api_key_env`` and ``headers_env`` variables (and a
``base_url`` that carries credentials besides them), the plugin policy and the plugins, and
everything the stack is built from (middleware sections, providers, the
``[state]`` URL and the plugin serving it). Nothing is sent to a provider, but what the stack
keeps its state in is contacted: the ``[state]`` Redis answers a PING, the SQLite ledger's file
opens (or its folder takes a new file), a PostgreSQL ledger accepts a connection; a state server
that keeps budgets is asked whether it keeps them across its own restart (Redis: persistence).
Problems come grouped by section (:data:`SECTIONS`), every one of them, not the first. Notes
are not problems: every configured model without a price (:func:`unpriced`), whose calls would
cost an unknown amount.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sqlite3
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import attrs

from provmw.cli.pools import inactive_pools, is_pool, member_of, pool_lines
from provmw.errors import ProvmwError
from provmw.scrubbing import masked_url, url_secrets
from provmw.settings import Settings, load_settings

if TYPE_CHECKING:
    from provmw.manager import ServiceManager

__all__ = ["SECTIONS", "keys_given_twice", "ledger_problems", "locations", "missing_variables", "notes", "pools",
           "problems", "report", "state_problems", "unpriced"]

SECTIONS = ("settings", "credentials", "plugins", "state", "ledger")
# A check waits this long for a server: long enough for a slow network, short enough for a command.
CONTACT_TIMEOUT_S = 3.0


async def report(path: str | os.PathLike[str] | None = None,
                 environ: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """Every problem found, by section (in :data:`SECTIONS`' order); a section without one is left out."""
    environ = os.environ if environ is None else environ
    try:
        settings = load_settings(path, environ)
    except ProvmwError as exc:  # nothing else can be checked without the settings: each table's problems
        return {"settings": _distinct_list([str(exc), *_table_problems(path, environ)])}
    found: dict[str, list[str]] = {section: [] for section in SECTIONS}
    found["settings"] += inactive_pools(settings)
    found["credentials"] += [*missing_variables(settings), *keys_given_twice(settings)]
    await _stack_problems(settings, environ, found)
    found["ledger"] += await ledger_problems(settings)
    return _distinct(found)


async def problems(path: str | os.PathLike[str] | None = None,
                   environ: Mapping[str, str] | None = None) -> list[str]:
    """Every problem found in the settings and what they name; empty when all is well."""
    return [problem for section in (await report(path, environ)).values() for problem in section]


def _distinct(found: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each problem once (a store no plugin serves is found building the stack and again asking
    for it), in its first section; empty sections dropped."""
    seen: set[str] = set()
    kept: dict[str, list[str]] = {}
    for section, lines in found.items():
        fresh = [line for line in dict.fromkeys(lines) if line not in seen]
        seen.update(fresh)
        if fresh:
            kept[section] = fresh
    return kept


def locations(path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """Where the settings come from and where the usage ledger is; nothing when the settings do not load."""
    from provmw.middleware import USAGE, section_options
    from provmw.stores.shared import masked_url

    try:
        settings = load_settings(path, environ)
        ledger = section_options(settings, USAGE)
    except ProvmwError:
        return []
    kept = {"sqlite": ledger.path, "memory": "in memory only (store = \"memory\")"}.get(ledger.store)
    return [f"settings: {settings.source}", f"usage ledger: {kept or masked_url(ledger.store)}"]


def pools(path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """Each pool (strategy, fallbacks, deployments) and alias; nothing when the settings do not load."""
    try:
        settings = load_settings(path, environ)
    except ProvmwError:
        return []
    return pool_lines(settings)


def notes(path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """What is worth knowing but no problem: every configured model without a price; nothing when
    the settings do not load (that is a problem, reported)."""
    try:
        settings = load_settings(path, environ)
    except ProvmwError:
        return []
    return list(unpriced(settings))


def unpriced(settings: Settings) -> Iterator[str]:
    """One line per configuration whose provider and model have no price, neither its own nor the
    bundled table's: its calls' cost is unknown and the ledger records them as billed "unknown"."""
    from provmw.pricing import PriceTable

    prices = PriceTable()
    for config in settings.configurations.values():
        if not is_pool(config) and prices.lookup(config) is None:  # a pool is priced by its deployments
            table = _table_of(settings, config.identifier)
            within = _in_pools(settings, config)
            yield (f"{settings.source}: [{table}] {config.provider} model {config.model!r}{within} has no price: "
                   f"its calls' cost is unknown, and the usage ledger records them as billed \"unknown\"; "
                   f"set [{table}.price]")


def _table_of(settings: Settings, identifier: str) -> str:
    """Where a configuration is written: ``configurations.NAME``, or an inline deployment's table."""
    pool, _, deployment = identifier.partition("/")
    if deployment and pool in settings.pools:
        return f"pools.{pool}.deployments.{deployment}"
    return f"configurations.{identifier}"


def _in_pools(settings: Settings, config: Any) -> str:
    found = member_of(settings, config.identifier)
    return f", a deployment of pool {', '.join(repr(p) for p in found)}," if found else ""


def missing_variables(settings: Settings) -> Iterator[str]:
    """One line per key or header variable a configuration names and the environment lacks."""
    for config in settings.configurations.values():
        named = [("api_key_env", config.api_key_env)] if config.api_key_env else []
        named += [(f"headers_env.{header}", variable) for header, variable in config.headers_env.items()]
        for key, variable in named:
            if not settings.environ.get(variable):  # an empty value is no key: the provider refuses it
                state = "is set but empty" if variable in settings.environ else "is not set"
                yield (f"{settings.source}: [{_table_of(settings, config.identifier)}] {key}: "
                       f"environment variable {variable} {state}")


def keys_given_twice(settings: Settings) -> Iterator[str]:
    """One line per configuration whose ``base_url`` carries credentials (a user part, a key in its
    query) while ``api_key_env`` names a key too: its first call would fail, or send two keys."""
    for config in settings.configurations.values():
        if config.api_key_env and url_secrets(config.base_url):
            yield (f"{settings.source}: [{_table_of(settings, config.identifier)}] base_url "
                   f"{masked_url(config.base_url)} "
                   f"carries credentials and api_key_env is set too: give the key one way (api_key_env, or the URL)")


async def _stack_problems(settings: Settings, environ: Mapping[str, str], found: dict[str, list[str]]) -> None:
    from provmw.manager import ServiceManager
    from provmw.plugins import PluginHost

    try:
        host = PluginHost(settings.plugins, environ=environ).load(strict=False)
    except ProvmwError as exc:  # the plugin policy itself (its environment variables) does not hold
        found["plugins"].append(str(exc))
        return
    found["plugins"] += [info.error or f"plugin {info.name!r} failed"
                         for info in host.plugins if info.status == "failed"]
    unreachable = await state_problems(settings)
    found["state"] += unreachable
    try:
        manager = ServiceManager(settings, host=host)  # a failed plugin is left out, as reported above
    except ProvmwError as exc:
        for problem in [str(exc), *await _part_problems(settings, host)]:
            found[_section_of(problem)].append(problem)
        return
    try:
        if not unreachable:  # said once: the budget question would only find it unreachable again
            found["state"] += await _budget_state_problems(manager)
    finally:
        await manager.aclose()


def _table_problems(path: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> list[str]:
    """When the settings do not load: each configuration table, then the rest, on its own, so that
    every table's problem shows and not only the first."""
    from provmw.settings import find_settings_file, parse_settings

    found = find_settings_file(path, environ)
    try:
        document = tomllib.loads(found.read_text(encoding="utf-8")) if found is not None else {}
    except (OSError, tomllib.TOMLDecodeError):
        return []  # said already, by the whole file's error
    if found is not None and found.name == "pyproject.toml":
        document = document.get("tool", {}).get("provmw", {})
    configurations = document.get("configurations", {})
    parts: list[dict[str, Any]] = [{"configurations": {name: table}} for name, table in configurations.items()] \
        if isinstance(configurations, dict) else []
    parts.append({key: value for key, value in document.items() if key not in ("configurations", "default")})
    return [problem for part in parts if (problem := _parse_problem(parse_settings, part, str(found), environ))]


def _parse_problem(parse: Any, document: dict[str, Any], source: str, environ: Mapping[str, str]) -> str | None:
    try:
        parse(document, source, environ)
    except ProvmwError as exc:
        return str(exc)
    return None


async def _part_problems(settings: Settings, host: Any) -> list[str]:
    """When the stack cannot be built: each middleware section and each configuration on its own,
    so that every problem shows and not only the first."""
    from provmw.manager import ServiceManager

    parts: list[dict[str, Any]] = [{"middleware": {name: section}, "configurations": {}, "default": None}
                                   for name, section in settings.middleware.items()]
    parts += [{"middleware": {}, "configurations": {name: attrs.evolve(config, fallbacks=())}, "default": name}
              for name, config in settings.configurations.items()]
    found = []
    for part in parts:
        try:
            manager = ServiceManager(attrs.evolve(settings, state=None, **part), host=host)
        except ProvmwError as exc:
            found.append(str(exc))
        else:
            await manager.aclose()
    return found


def _distinct_list(problems: list[str]) -> list[str]:
    return list(dict.fromkeys(problems))


def _section_of(problem: str) -> str:
    """Where an error building the stack belongs: the state, the ledger, or the settings at large."""
    if "[state]" in problem:
        return "state"
    return "ledger" if "[middleware.usage] store" in problem else "settings"


async def _budget_state_problems(manager: ServiceManager) -> list[str]:
    """What the shared state keeping the budgets reports against them (Redis: no persistence, so a
    restart forgets the spend); asked only when a budget is in the stack and kept there."""
    shared, ask = manager.state.shared, getattr(manager.state.shared, "budget_problems", None)
    if shared is None or ask is None or "budget" not in manager.state.shared_concerns or \
            "budget" not in manager.pipeline.order:
        return []
    problems: list[str] = await ask()
    return problems


async def state_problems(settings: Settings) -> list[str]:
    """The ``[state]`` Redis, asked for a PING (after AUTH when its URL carries a password); a
    state URL of another scheme is its plugin's to check."""
    state = settings.state
    if state is None or state.scheme not in ("redis", "rediss"):
        return []
    try:
        await asyncio.wait_for(_ping(state.url), CONTACT_TIMEOUT_S)
    except (OSError, TimeoutError, _RedisRefused) as exc:
        why = str(exc) or f"no answer within {CONTACT_TIMEOUT_S:g} s"
        return [f"{settings.source}: [state] url {masked_url(state.url)}: Redis cannot be reached ({why})"]
    return []


class _RedisRefused(Exception):
    """Redis answered a command with an error (a wrong password, a server still loading)."""


async def _ping(url: str) -> None:
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname or "127.0.0.1", parts.port or 6379,
                                                   ssl=True if parts.scheme == "rediss" else None)
    try:
        for command in [*_auth(parts.username, parts.password), ["PING"]]:
            writer.write(b"".join([f"*{len(command)}\r\n".encode(),
                                   *(f"${len(word.encode())}\r\n{word}\r\n".encode() for word in command)]))
            reply = (await reader.readline()).decode(errors="replace").strip()
            if not reply.startswith("+"):
                raise _RedisRefused(reply.lstrip("-") or "the connection closed without an answer")
    finally:
        writer.close()


def _auth(username: str | None, password: str | None) -> list[list[str]]:
    if not password:
        return []
    return [["AUTH", *([unquote(username)] if username else []), unquote(password)]]


async def ledger_problems(settings: Settings) -> list[str]:
    """The ledger's store, contacted: the SQLite file opens (or its folder takes a new one), a
    PostgreSQL server accepts a connection; a store of another scheme is its plugin's to check."""
    from provmw.middleware import USAGE, section_options

    try:
        ledger = section_options(settings, USAGE)
    except ProvmwError:
        return []  # the section itself is wrong: reported when the stack is built
    where = f"{settings.source}: [middleware.usage]"
    if ledger.store == "sqlite":
        problem = _sqlite_problem(Path(ledger.path))
        return [] if problem is None else [f"{where} path: {problem}"]
    if urlsplit(ledger.store).scheme in ("postgresql", "postgres"):
        return await _postgres_problems(ledger.store, where)
    return []


def _sqlite_problem(path: Path) -> str | None:
    """Why the SQLite ledger at ``path`` cannot be written, or None."""
    if path.is_dir():
        return f"{path} is a folder, not a SQLite file"
    if path.exists():
        try:  # opened read-write and asked for its schema: a file that is no database fails here
            with sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True) as connection:
                connection.execute("PRAGMA schema_version")
        except sqlite3.Error as exc:
            return f"the SQLite file {path} cannot be opened for writing ({exc})"
        return None
    folder = path.parent
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "is a folder that does not exist"
        return f"{folder} {what}, and the SQLite file {path.name} goes there"
    return None if os.access(folder, os.W_OK) else f"the folder {folder} of the SQLite file is not writable"


async def _postgres_problems(url: str, where: str) -> list[str]:
    try:
        psycopg: Any = importlib.import_module("psycopg")  # provmw-postgres' driver; not provmw's
    except ImportError:
        return []  # then no plugin serves the URL either, which the stack reports
    try:
        connection = await asyncio.wait_for(psycopg.AsyncConnection.connect(
            url, connect_timeout=max(2, round(CONTACT_TIMEOUT_S))), CONTACT_TIMEOUT_S + 1)
    except (psycopg.Error, OSError, TimeoutError) as exc:
        why = _without_secrets(str(exc).splitlines()[0] if str(exc) else "no answer", url)
        return [f"{where} store {masked_url(url)}: PostgreSQL cannot be reached ({why})"]
    await connection.close()
    return []


def _without_secrets(text: str, url: str) -> str:
    for secret in url_secrets(url):
        text = text.replace(secret, "***")
    return text
