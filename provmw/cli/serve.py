"""``provmw serve``: the OpenAI- and Anthropic-compatible gateway (``provmw.gateway``) on the
manager the settings file builds, its callers verified by the key store (``provmw keys``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from provmw.gateway.app import GatewayOptions

__all__ = ["add_serve_command", "serve_command"]


def add_serve_command(commands: Any, command: Callable[[Any, str, str], argparse.ArgumentParser]) -> None:
    """Add ``provmw serve`` with ``command`` (``provmw.cli``'s own subcommand maker)."""
    serve = command(commands, "serve", "run the gateway: OpenAI- and Anthropic-compatible endpoints behind "
                    "virtual keys")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=4000, help="port to listen on; 0 picks a free one (default: 4000)")
    serve.add_argument("--keys", metavar="PATH|URL", help="the key store: a SQLite file for one host (default: "
                       "provmw-keys.sqlite3 beside the ledger), postgresql://... or redis://... for a fleet")
    serve.add_argument("--max-body-bytes", type=int, default=8 * 1024 * 1024, help="larger requests get 413")
    serve.add_argument("--max-concurrent-per-key", type=int, default=64, help="more in flight per key get 429")
    serve.add_argument("--shutdown-grace-s", type=float, default=30.0,
                       help="on SIGTERM/SIGINT, how long calls in flight may take to finish (default: 30)")
    serve.add_argument("--workers", type=_positive, default=1,
                       help="processes sharing the port (Linux SO_REUSEPORT), each with its own manager; the parent "
                       "starts again one that exits (default: 1, served in this process)")


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return number


async def serve_command(args: argparse.Namespace, out: TextIO) -> int:
    """Serve until SIGTERM or SIGINT; prints the URL once listening."""
    if args.workers > 1:
        return await _serve_workers(args, out)
    from provmw.gateway.key_stores import open_key_store
    from provmw.gateway.serving import serve
    from provmw.manager import ServiceManager

    manager = ServiceManager.from_file(args.config)
    keys = open_key_store(args.keys, manager.settings, host=manager.host)
    options = _options(args)

    def listening(url: str) -> None:
        out.write(f"provmw serve: listening on {url}\n")
        out.flush()

    await serve(manager, keys, host=args.host, port=args.port, options=options, on_listening=listening)
    out.write("provmw serve: stopped\n")
    return 0


async def _serve_workers(args: argparse.Namespace, out: TextIO) -> int:
    """``--workers N``: the settings and the key store's plugin checked here first, so a bad file or an
    unserved ``--keys`` URL stops before any worker starts."""
    from provmw.gateway.key_stores import key_location, open_key_store
    from provmw.gateway.workers import WorkerSpec, run_workers
    from provmw.settings import load_settings

    settings = load_settings(args.config)
    await open_key_store(args.keys, settings).aclose()
    spec = WorkerSpec(config=args.config, keys=str(key_location(args.keys, settings)),
                      host=args.host, port=args.port, options=_options(args), verbose=args.verbose)

    def listening(url: str) -> None:
        out.write(f"provmw serve: {args.workers} workers listening on {url}\n")
        out.flush()

    status = await run_workers(spec, args.workers, on_listening=listening)
    out.write("provmw serve: stopped\n" if status == 0 else "provmw serve: stopped: a worker failed (see the log)\n")
    return status


def _options(args: argparse.Namespace) -> GatewayOptions:
    from provmw.gateway.app import GatewayOptions

    return GatewayOptions(max_body_bytes=args.max_body_bytes, max_concurrent_per_key=args.max_concurrent_per_key,
                          shutdown_grace_s=args.shutdown_grace_s)
