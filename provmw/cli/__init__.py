"""The ``provmw`` command: chat, embed, the other operations (``provmw.cli.operations``), stack, plugins,
usage, budget, fake-provider, demo."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import errno
import functools
import logging
import os
import re
import sys
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar
from zoneinfo import ZoneInfo

from provmw.cli._calls import cost_text, option_pairs, target, usage_line
from provmw.cli.keys import add_keys_command, keys_command
from provmw.cli.operations import OPERATION_COMMANDS, add_operation_commands
from provmw.cli.serve import add_serve_command, serve_command
from provmw.errors import ConfigurationError, InvalidDataError, PluginError, ProvmwError

if TYPE_CHECKING:
    from provmw.settings import Settings
    from provmw.state import State

T = TypeVar("T")

__all__ = ["main"]




async def _chat(args: argparse.Namespace, out: TextIO) -> int:
    from provmw.manager import ServiceManager

    call = {**target(args), "user": args.user, "tenant": args.tenant, "options": option_pairs(args.option)}
    async with ServiceManager.from_file(args.config) as manager:
        if args.stream:
            return await _stream(manager.stream_chat(args.prompt, **call), out)
        response = await manager.chat(args.prompt, **call)
    out.write(f"{response.text}\n")
    usage_line(response, out)
    return 0


async def _stream(chunks: AsyncIterator[Any], out: TextIO) -> int:
    usage, served_by = None, ""
    async for chunk in chunks:
        out.write(chunk.text)
        out.flush()  # each piece shows as it arrives
        usage, served_by = chunk.usage or usage, chunk.served_by
    out.write("\n")
    if usage is not None:
        out.write(f"-- served_by={served_by} tokens in={usage.input_tokens} out={usage.output_tokens} "
                  f"cost={cost_text(usage)} streamed\n")
    return 0




async def _embed(args: argparse.Namespace, out: TextIO) -> int:
    from provmw.manager import ServiceManager

    async with ServiceManager.from_file(args.config) as manager:
        response = await manager.embed(args.texts, dimensions=args.dimensions, **target(args))
    for text, vector in zip(args.texts, response.vectors, strict=True):
        head = ", ".join(f"{x:.4f}" for x in vector[:4])
        out.write(f"{text!r}: [{head}{', ...' if len(vector) > 4 else ''}] ({len(vector)} dims)\n")
    usage_line(response, out)
    return 0






def _stack(args: argparse.Namespace, out: TextIO) -> int:
    from provmw.cli.pools import pool_lines
    from provmw.manager import ServiceManager

    manager = ServiceManager.from_file(args.config)
    out.write(f"{'priority':>8}  {'middleware':<18}plugin\n")
    for entry in manager.stack:
        out.write(f"{entry.priority:>8}  {entry.name:<18}{entry.plugin}\n")
    if not manager.stack:
        out.write("(no middleware: calls go straight to the provider)\n")
    out.write(f"providers: {', '.join(sorted(manager.providers))}\n")
    state = manager.settings.state
    if state is not None:
        out.write(f"shared state: {state.shown_url} ({', '.join(state.shared)})\n")
    out.writelines(f"{line}\n" for line in pool_lines(manager.settings))
    return 0


def _plugins(args: argparse.Namespace, out: TextIO) -> int:
    from provmw.plugins import PluginHost
    from provmw.settings import load_settings

    host = PluginHost(load_settings(args.config).plugins).load(strict=False)
    out.write(f"{'plugin':<16}{'distribution':<22}{'version':<10}status\n")
    for info in host.plugins:
        out.write(f"{info.name:<16}{info.distribution:<22}{info.version:<10}{info.status}\n")
        if info.error:
            out.write(f"    {info.error}\n")
    # Non-zero when a plugin failed, so a script or CI step notices.
    return 1 if any(info.status == "failed" for info in host.plugins) else 0


async def _check(args: argparse.Namespace, out: TextIO) -> int:
    from provmw.cli.check import locations, notes, pools, report

    for line in [*locations(args.config), *pools(args.config)]:
        out.write(f"{line}\n")
    if unpriced := notes(args.config):  # worth knowing, no problem: the exit status ignores them
        out.write(f"pricing ({len(unpriced)} note(s)):\n")
        out.writelines(f"  note: {note}\n" for note in unpriced)
    found = await report(args.config)
    for section, problems in found.items():  # every problem, under the part of the setup it concerns
        out.write(f"{section} ({len(problems)} problem(s)):\n")
        out.writelines(f"  problem: {problem}\n" for problem in problems)
    count = sum(len(problems) for problems in found.values())
    out.write(f"{count} problem(s) found\n" if found else "ok: settings, keys, plugins, state and ledger check out\n")
    return 1 if found else 0


def _usage(args: argparse.Namespace, out: TextIO) -> int:
    from provmw.cli.reports import ledger_rows, render
    from provmw.middleware import USAGE, section_options

    settings, zone = _report_settings(args)
    options = section_options(settings, USAGE)
    if options.store == "memory":
        raise ConfigurationError("provmw usage reads the SQLite ledger or a plugin's, but [middleware.usage] "
                                 "store is 'memory'")
    if options.store == "sqlite" and not _exists(options.path, "usage ledger"):
        out.write(render([], args.format))
        return 0
    if Path(f"{options.path}.spill").exists():
        _note(f"some records wait in {options.path}.spill and are not counted yet; the next manager start "
              "writes them to the ledger")
    since = _since(args.since, zone)
    read = functools.partial(ledger_rows, settings, args.group_by, zone, since)
    out.write(render(asyncio.run(_read_state(settings, read)), args.format))
    return 0


def _budget(args: argparse.Namespace, out: TextIO) -> int:
    from provmw.cli.reports import budget_rows, budget_table, render
    from provmw.middleware import BUDGET, section_options

    settings, zone = _report_settings(args)
    options = section_options(settings, BUDGET)
    if not options.limits:
        _note("no budget limits are configured ([[middleware.budget.limits]])")
        out.write(render([], args.format))
        return 0
    shared = settings.state is not None and "budget" in settings.state.shared
    if not shared and options.store != "sqlite":
        raise ConfigurationError("provmw budget reads the SQLite store, but [middleware.budget] store is 'memory'")
    if not shared and not _exists(options.path, "budget store"):
        out.write(render([], args.format))
        return 0
    now = time.time()
    states = asyncio.run(_read_state(settings, lambda state: state.budget_store().states(now=now)))
    rows = budget_rows(states, options.limits, zone, now)
    out.write(render(budget_table(rows) if args.format == "table" else rows, args.format))
    return 0


async def _read_state(settings: Settings, read: Callable[[State], Awaitable[T]]) -> T:
    """Read the state the settings name, through the same stores the middleware use."""
    from provmw.plugins import PluginHost
    from provmw.state import open_state

    host = PluginHost(settings.plugins)
    state = open_state(settings, host.collect_state(settings), ledger=host.collect_ledger(settings))
    try:
        return await read(state)
    finally:
        await state.aclose()


def _report_settings(args: argparse.Namespace) -> tuple[Settings, ZoneInfo]:
    from provmw.middleware import BUDGET, section_options
    from provmw.middleware.budget import BudgetOptions
    from provmw.settings import load_settings

    settings = load_settings(args.config)
    name = args.tz or section_options(settings, BUDGET).timezone
    BudgetOptions(timezone=name)  # the same check, and error, as in the settings file
    return settings, ZoneInfo(name)


def _exists(path: str, what: str) -> bool:
    from pathlib import Path

    if Path(path).is_file():
        _note(f"{what}: {path}")
        return True
    _note(f"no {what} at {path} yet")
    return False


def _note(message: str) -> None:
    """Prose for the reader goes to stderr, so stdout stays the report (valid JSON with --format json)."""
    sys.stderr.write(f"provmw: {message}\n")


def _since(value: str | None, zone: ZoneInfo) -> float | None:
    """``7d``, ``12h`` or ``30m`` ago, or an ISO date or time (in the report's time zone if naive)."""
    if value is None:
        return None
    relative = re.fullmatch(r"(\d+)([dhm])", value)
    if relative:
        seconds = {"d": 86_400, "h": 3_600, "m": 60}[relative[2]] * int(relative[1])
        return time.time() - seconds
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ConfigurationError(f"--since: expected 7d, 12h, 30m or an ISO date/time, got {value!r}") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=zone)).timestamp()


async def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from provmw.cli.demo import run_demo

    return await run_demo(out)


def _fake_provider(args: argparse.Namespace, out: TextIO) -> int:
    from provmw.testing import serve
    from provmw.testing.faults import plans_from_arguments

    plans = plans_from_arguments(args)  # a bad option stops here, before the port is taken
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(args.host, args.port, plans))
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        _note(f"fake-provider: port {args.port} on {args.host} is taken (another fake provider?); "
              "try --port with another number")
        return 1
    return 0


def _fake_arguments(fake: argparse.ArgumentParser) -> None:
    from provmw.testing.faults import EXAMPLES, add_fault_arguments

    fake.description = "A loopback server speaking the OpenAI and Anthropic wire formats, with scripted faults."
    fake.epilog = EXAMPLES
    fake.formatter_class = argparse.RawDescriptionHelpFormatter
    add_fault_arguments(fake)


def _usage_arguments(usage: argparse.ArgumentParser) -> None:
    from provmw.cli.pools import POOL_GROUP
    from provmw.cli.reports import GROUPS, usage_help

    usage.epilog = usage_help()
    usage.formatter_class = argparse.RawDescriptionHelpFormatter
    usage.add_argument("--group-by", choices=(*GROUPS, POOL_GROUP), default="day",
                       help="key, team: a gateway call's virtual key (its id) and team (ORGANISATION/TEAM); "
                            "pool: each deployment's records under the pools the settings list it in")


def _command(commands: Any, name: str, help: str) -> argparse.ArgumentParser:
    """A subcommand that also takes ``--config`` and ``-v`` after its name (``provmw usage -v``)."""
    sub: argparse.ArgumentParser = commands.add_parser(name, help=help, allow_abbrev=False)
    # SUPPRESS: left out, they keep what was given before the command.
    sub.add_argument("--config", default=argparse.SUPPRESS, help="settings file (as before the command)")
    sub.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                     help="log each attempt and each retry (as before the command)")
    return sub


def _parser() -> argparse.ArgumentParser:
    # No abbreviations: `--config X` after a subcommand must not quietly become `--configuration X`.
    parser = argparse.ArgumentParser(prog="provmw", description="One middleware stack for LLM calls.",
                                     allow_abbrev=False)
    parser.add_argument("--config", help="settings file (default: $PROVMW_CONFIG, else provmw.toml or pyproject.toml "
                        "[tool.provmw] here or in the nearest parent folder)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log each attempt (configuration, provider/model, outcome, time) and each retry")
    commands = parser.add_subparsers(dest="command", required=True)
    chat = _command(commands, "chat", help="one chat call through the full stack")
    chat.add_argument("prompt")
    chat.add_argument("--user", help="who the call is for (budgets, usage, cache)")
    chat.add_argument("--tenant", help="the tenant the call is for (budgets, usage, cache)")
    chat.add_argument("--option", metavar="KEY=VALUE", action="append", default=[],
                      help="a generation option, e.g. temperature=0.2 (repeatable; JSON values parsed)")
    chat.add_argument("--stream", action="store_true", help="print the answer as it streams")
    embed = _command(commands, "embed", help="one embedding call through the full stack")
    embed.add_argument("texts", nargs="+")
    embed.add_argument("--dimensions", type=int)
    for sub in (chat, embed, *add_operation_commands(commands, _command)):
        sub.add_argument("-c", "--configuration", help="named configuration (default: the default one)")
        sub.add_argument("--provider")
        sub.add_argument("--model")
        sub.add_argument("--base-url")
    _command(commands, "stack", help="the resolved middleware order")
    _command(commands, "plugins", help="discovered plugins and their status")
    _command(commands, "check", help="validate settings, key variables, plugins and state; list every problem")
    usage = _command(commands, "usage", help="the usage ledger, grouped")
    _usage_arguments(usage)
    usage.add_argument("--since", help="7d, 12h, 30m, or an ISO date/time")
    budget = _command(commands, "budget", help="each budget bucket: limit, spent, reserved, resets at")
    for sub in (usage, budget):
        sub.add_argument("--format", choices=("table", "csv", "json"), default="table")
        sub.add_argument("--tz", help="time zone for days and windows (default: [middleware.budget] timezone)")
    _command(commands, "demo", help="a scripted story against the loopback fake provider")
    fake = _command(commands, "fake-provider", help="run the fake provider on loopback, with faults")
    fake.add_argument("--host", default="127.0.0.1")
    fake.add_argument("--port", type=int, default=8765, help="0 picks a free port (printed)")
    _fake_arguments(fake)
    add_keys_command(commands, _command)
    add_serve_command(commands, _command)
    return parser


_COMMANDS: dict[str, Any] = {"chat": _chat, "embed": _embed, **OPERATION_COMMANDS, "stack": _stack, "plugins": _plugins,
                             "check": _check, "keys": keys_command,
                             "usage": _usage, "budget": _budget, "demo": _demo, "fake-provider": _fake_provider,
                             "serve": serve_command}


# The errors whose traceback ``-v`` prints: they mean code went wrong, not that a call was refused.
_CODE_FAILURES = (PluginError, InvalidDataError)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``provmw`` command; returns the exit status."""
    out = out or sys.stdout
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    command = _COMMANDS[args.command]
    try:
        result = command(args, out)
        return asyncio.run(result) if asyncio.iscoroutine(result) else int(result)
    except BrokenPipeError:
        # The reader went away (`provmw stack | head`) with what it wanted: point stdout at
        # devnull so the interpreter's last flush does not fail again (the Python docs' recipe).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except ProvmwError as exc:
        sys.stderr.write(f"provmw: {type(exc).__name__}: {exc}\n")
        # A refusal (bad settings, a budget, a provider's answer) is the whole story in its
        # message; a traceback helps only where code failed: a plugin's, or data that won't decode.
        if not isinstance(exc, _CODE_FAILURES):
            return 2
        if args.verbose:
            traceback.print_exception(exc, file=sys.stderr)
        else:
            sys.stderr.write("provmw: run with -v for the traceback\n")
        return 2
