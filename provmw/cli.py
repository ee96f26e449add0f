"""The ``provmw`` command: chat, embed, stack, plugins, fake-provider, demo."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from provmw.errors import ProvmwError

__all__ = ["main"]


def _target(args: argparse.Namespace) -> dict[str, Any]:
    target = {"configuration": args.configuration, "provider": args.provider, "model": args.model,
              "base_url": args.base_url}
    return {k: v for k, v in target.items() if v is not None}


async def _chat(args: argparse.Namespace, out: TextIO) -> int:
    from provmw.manager import ServiceManager

    async with ServiceManager.from_file(args.config) as manager:
        response = await manager.chat(args.prompt, **_target(args))
    out.write(f"{response.text}\n")
    _usage_line(response, out)
    return 0


async def _embed(args: argparse.Namespace, out: TextIO) -> int:
    from provmw.manager import ServiceManager

    async with ServiceManager.from_file(args.config) as manager:
        response = await manager.embed(args.texts, dimensions=args.dimensions, **_target(args))
    for text, vector in zip(args.texts, response.vectors, strict=True):
        head = ", ".join(f"{x:.4f}" for x in vector[:4])
        out.write(f"{text!r}: [{head}{', ...' if len(vector) > 4 else ''}] ({len(vector)} dims)\n")
    _usage_line(response, out)
    return 0


def _usage_line(response: Any, out: TextIO) -> None:
    usage = response.usage
    cost = "unpriced" if usage.cost_usd is None else f"${usage.cost_usd:.6f}"
    out.write(f"-- served_by={response.served_by} model={response.model} tokens in={usage.input_tokens} "
              f"out={usage.output_tokens} cost={cost} cached={response.cached}\n")


def _stack(args: argparse.Namespace, out: TextIO) -> int:
    from provmw.manager import ServiceManager

    manager = ServiceManager.from_file(args.config)
    out.write(f"{'priority':>8}  {'middleware':<18}plugin\n")
    for entry in manager.stack:
        out.write(f"{entry.priority:>8}  {entry.name:<18}{entry.plugin}\n")
    if not manager.stack:
        out.write("(no middleware: calls go straight to the provider)\n")
    out.write(f"providers: {', '.join(sorted(manager.providers))}\n")
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
    return 0


async def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from provmw.demo import run_demo

    return await run_demo(out)


def _fake_provider(args: argparse.Namespace, out: TextIO) -> int:
    from provmw.testing import main as serve

    serve(["--host", args.host, "--port", str(args.port)])
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="provmw", description="One middleware stack for LLM calls.")
    parser.add_argument("--config", help="settings file (default: $PROVMW_CONFIG, provmw.toml, pyproject.toml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each call (INFO level)")
    commands = parser.add_subparsers(dest="command", required=True)
    chat = commands.add_parser("chat", help="one chat call through the full stack")
    chat.add_argument("prompt")
    embed = commands.add_parser("embed", help="one embedding call through the full stack")
    embed.add_argument("texts", nargs="+")
    embed.add_argument("--dimensions", type=int)
    for sub in (chat, embed):
        sub.add_argument("-c", "--configuration", help="named configuration (default: the default one)")
        sub.add_argument("--provider")
        sub.add_argument("--model")
        sub.add_argument("--base-url")
    commands.add_parser("stack", help="the resolved middleware order")
    commands.add_parser("plugins", help="discovered plugins and their status")
    commands.add_parser("demo", help="a scripted story against the loopback fake provider")
    fake = commands.add_parser("fake-provider", help="run the fake provider on loopback")
    fake.add_argument("--host", default="127.0.0.1")
    fake.add_argument("--port", type=int, default=8765)
    return parser


_COMMANDS: dict[str, Any] = {"chat": _chat, "embed": _embed, "stack": _stack, "plugins": _plugins,
                             "demo": _demo, "fake-provider": _fake_provider}


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
    except ProvmwError as exc:
        sys.stderr.write(f"provmw: {type(exc).__name__}: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
