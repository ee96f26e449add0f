"""Running the gateway: bind, serve until SIGTERM or SIGINT, then shut down gracefully.

Shutdown stops accepting connections, gives the calls and streams in flight up to
``GatewayOptions.shutdown_grace_s`` to finish (aiohttp's runner waits for its handlers, then
cancels what is left), and only then closes the manager (its ledger written) and the key store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from aiohttp import web

from provmw.gateway.app import GatewayOptions, gateway_app

if TYPE_CHECKING:
    from provmw.gateway.keys import KeyStore
    from provmw.manager import ServiceManager

__all__ = ["serve"]

log = logging.getLogger("provmw.gateway")


async def serve(manager: ServiceManager, keys: KeyStore, *, host: str = "127.0.0.1", port: int = 4000,
                options: GatewayOptions | None = None, on_listening: Callable[[str], None] | None = None,
                stop: asyncio.Event | None = None, reuse_port: bool = False) -> None:
    """Serve ``manager`` behind ``keys`` on ``host:port`` until ``stop`` is set or a SIGTERM/SIGINT
    arrives; ``on_listening`` gets the URL bound (``port=0`` picks a free one). Closes the manager
    and the key store on the way out. ``reuse_port``: share the port with other processes that
    bind it so (``SO_REUSEPORT``: the kernel spreads connections over them; ``provmw.gateway.workers``)."""
    options = options if options is not None else GatewayOptions()
    stop = stop if stop is not None else asyncio.Event()
    runner = web.AppRunner(gateway_app(manager, keys, options), handler_cancellation=True, access_log=None,
                           shutdown_timeout=options.shutdown_grace_s)
    try:
        await runner.setup()
        await web.TCPSite(runner, host, port, reuse_port=reuse_port or None).start()
        bound_host, bound_port = runner.addresses[0][:2]
        url = f"http://{bound_host}:{bound_port}"
        log.info("provmw serve: listening on %s", url)
        if on_listening is not None:
            on_listening(url)
        with _signals_set(stop):
            await stop.wait()
        log.info("provmw serve: stopping; in-flight calls get up to %gs", options.shutdown_grace_s)
    finally:
        await runner.cleanup()  # stops accepting, waits for the handlers in flight (bounded)
        try:
            await manager.aclose()
        finally:
            await keys.aclose()


@contextlib.contextmanager
def _signals_set(stop: asyncio.Event) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    added = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not on this platform or thread
            loop.add_signal_handler(signum, stop.set)
            added.append(signum)
    try:
        yield
    finally:
        for signum in added:
            loop.remove_signal_handler(signum)
