"""``provmw keys``: create, list, disable and rotate the gateway's virtual keys, and set their budgets.

The whole key is printed once, by ``create`` and ``rotate``, alone on the first line of stdout
(for a script to take); nothing prints it again: the store keeps only its hash (ADR 0055).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from provmw._base.periods import PERIODS
from provmw.errors import ConfigurationError

if TYPE_CHECKING:
    from provmw.gateway import KeyRecord, KeyStore

__all__ = ["add_keys_command", "keys_command"]

Command = Callable[[Any, str, str], argparse.ArgumentParser]
_SHOWN_ONCE = "the key above is shown this once: provmw keeps only its hash, so store it now"
# Fail closed (ADR 0055): a key whose calls should be guarded is refused, never served unguarded.
_GUARD_REFUSED = ("note: provmw serve guards this key's calls by [middleware.guard.policies.{guard}] (plugin "
                  "provmw-guard); while the settings lack it, it refuses them (503)")


def add_keys_command(commands: Any, command: Command) -> argparse.ArgumentParser:
    """Add ``provmw keys`` and its actions with ``command`` (``provmw.cli``'s own)."""
    keys = command(commands, "keys", "virtual keys for provmw serve: create, list, disable, rotate, budget")
    actions = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    create = _action(actions, "create", "a new key, printed once (only its hash is kept)")
    create.add_argument("--organisation", required=True, help="who pays: the organisation the key belongs to")
    create.add_argument("--team", help="the key's team (a team budget covers all its keys)")
    create.add_argument("--user", help="the user of the key's calls: ledger rows, per-user budgets, cache scope "
                        "(default: the key id; never the request's 'user')")
    create.add_argument("--model", dest="models", action="append", default=[], metavar="NAME",
                        help="a configuration, pool or alias the key may call (repeatable; default: all)")
    create.add_argument("--guard", help="the guard policy the key's calls go through, [middleware.guard.policies.NAME] "
                        "(without it, the gateway refuses the key's calls, 503)")
    create.add_argument("--name", default="", help="a label for people")
    listing = _action(actions, "list", "the keys (no secret, no hash), oldest first")
    listing.add_argument("--organisation", help="only this organisation's")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    _action(actions, "disable", "refuse a key from now on (a server sees it within 2 s)").add_argument("key_id")
    _action(actions, "rotate", "a new key for the same owner, models and budgets; the old one disabled")\
        .add_argument("key_id")
    _budget_arguments(_action(actions, "budget", "set (or --remove) the budget of a key, team, user or organisation"))
    return keys


def _action(actions: Any, name: str, help: str) -> argparse.ArgumentParser:
    sub: argparse.ArgumentParser = actions.add_parser(name, help=help, description=help, allow_abbrev=False)
    sub.add_argument("--keys", metavar="PATH|URL", help="the key store: a SQLite file (default: provmw-keys.sqlite3 "
                     "beside the ledger, [middleware.usage] path), or postgresql://... or redis://... for a fleet "
                     "(provmw-postgres, provmw-redis)")
    sub.add_argument("--config", default=argparse.SUPPRESS, help="settings file (as before the command)")
    return sub


def _budget_arguments(budget: argparse.ArgumentParser) -> None:
    whose = budget.add_mutually_exclusive_group(required=True)
    whose.add_argument("--key", metavar="KEY_ID", help="one key's budget")
    whose.add_argument("--team", metavar="ORGANISATION/TEAM", help="the budget every key of the team draws on")
    whose.add_argument("--user", metavar="ORGANISATION/USER", help="the budget every key of the user draws on")
    whose.add_argument("--organisation", help="the budget every key of the organisation draws on")
    budget.add_argument("--period", choices=PERIODS, required=True)
    budget.add_argument("--max-cost-usd", type=float)
    budget.add_argument("--max-tokens", type=int)
    budget.add_argument("--max-requests", type=int)
    budget.add_argument("--remove", action="store_true", help="remove the period's limit instead")


async def keys_command(args: argparse.Namespace, out: TextIO) -> int:
    """Run ``provmw keys ACTION`` against the key store."""
    from provmw.gateway.key_stores import key_location, open_key_store
    from provmw.scrubbing import masked_url
    from provmw.settings import load_settings

    settings = load_settings(args.config)
    place = key_location(args.keys, settings)
    if isinstance(place, Path) and args.keys_command in ("list", "disable", "rotate") and not place.is_file():
        if args.keys_command == "list":
            _note(f"no key store at {place} yet")
            out.write("[]\n" if args.format == "json" else "(no keys)\n")
            return 0
        raise ConfigurationError(f"no key store at {place} (provmw keys create makes it; --keys names another)")
    _note(f"key store: {place if isinstance(place, Path) else masked_url(place)}")
    store = open_key_store(args.keys, settings)
    try:
        return await _ACTIONS[args.keys_command](store, args, out)
    finally:
        await store.aclose()


async def _create(store: KeyStore, args: argparse.Namespace, out: TextIO) -> int:
    whole, record = await store.create(args.organisation, team=args.team, user=args.user, models=args.models,
                                       guard=args.guard, name=args.name)
    if record.guard is not None:
        _note(_GUARD_REFUSED.format(guard=record.guard))
    return _shown_once(whole, record, out)


async def _rotate(store: KeyStore, args: argparse.Namespace, out: TextIO) -> int:
    whole, record = await store.rotate(args.key_id)
    _note(f"key {args.key_id} is disabled (a server sees it within 2 s)")
    return _shown_once(whole, record, out)


def _shown_once(whole: str, record: KeyRecord, out: TextIO) -> int:
    from provmw.cli.reports import render

    out.write(f"{whole}\n")
    out.write(render(table([record]), "table"))
    _note(_SHOWN_ONCE)
    return 0


async def _list(store: KeyStore, args: argparse.Namespace, out: TextIO) -> int:
    from provmw.cli.reports import render

    records = await store.list(args.organisation)
    if args.format == "json":
        out.write(render([record.as_data() for record in records], "json"))
    else:
        out.write(render(table(records), "table") if records else "(no keys)\n")
    return 0


async def _disable(store: KeyStore, args: argparse.Namespace, out: TextIO) -> int:
    record = await store.disable(args.key_id)
    out.write(f"disabled {record.key_id} ({record.organisation}); a server sees it within 2 s\n")
    return 0


async def _budget(store: KeyStore, args: argparse.Namespace, out: TextIO) -> int:
    from provmw.gateway.keys import KEY_SCOPES

    scope, subject = next((s, v) for s in KEY_SCOPES if (v := getattr(args, s)) is not None)
    maxima = {"max_cost_usd": args.max_cost_usd, "max_tokens": args.max_tokens, "max_requests": args.max_requests}
    given = any(value is not None for value in maxima.values())
    if given == args.remove:
        raise ConfigurationError("provmw keys budget: give --max-cost-usd, --max-tokens or --max-requests, "
                                 "or --remove (not both)")
    limit = await store.set_budget(scope, subject, args.period, **maxima)  # type: ignore[arg-type]
    shown = "removed" if limit is None else ", ".join(part for part in (
        "" if limit.max_cost_usd is None else f"${limit.max_cost_usd:g}",
        "" if limit.max_tokens is None else f"{limit.max_tokens} tokens",
        "" if limit.max_requests is None else f"{limit.max_requests} requests") if part)
    out.write(f"{scope}:{subject} {args.period}: {shown}\n")
    return 0


def table(records: list[KeyRecord]) -> list[dict[str, Any]]:
    """Keys for reading: '-' for none, the models joined ('(all)' for every one)."""
    return [{name: "-" if value is None or value == "" else value for name, value in
             {**record.as_data(), "models": ",".join(record.models) or "(all)"}.items()} for record in records]


def _note(message: str) -> None:
    """Prose goes to stderr, so stdout stays the key and the report."""
    sys.stderr.write(f"provmw: {message}\n")


_ACTIONS: dict[str, Callable[[KeyStore, argparse.Namespace, TextIO], Awaitable[int]]] = {
    "create": _create, "list": _list, "disable": _disable, "rotate": _rotate, "budget": _budget}
