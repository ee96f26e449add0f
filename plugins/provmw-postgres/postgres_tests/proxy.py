"""A TCP proxy in front of PostgreSQL that a test switches between forwarding, silence and refusal.

- ``forward``: bytes go both ways, as if the client talked to PostgreSQL itself.
- ``silent``: connections open or opened stay open, but nothing comes back (a server that
  hangs, a firewall that drops packets): what a client-side bound is for.
- ``refuse``: nothing listens on the port; open connections are cut.

Leaving ``silent`` cuts the silenced connections: bytes were dropped mid-conversation, so they
can never carry the protocol again.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Literal

__all__ = ["Mode", "TcpProxy"]

Mode = Literal["forward", "silent", "refuse"]


class TcpProxy:
    """A loopback port that forwards to ``target_port``, or goes silent, or refuses."""

    def __init__(self, target_port: int = 5432) -> None:
        self.target_port, self.port = target_port, 0
        self.mode: Mode = "forward"
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[Any]] = set()

    def url(self, database: str = "test") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def switch(self, mode: Mode) -> None:
        """Go ``mode`` from now on, for open connections too."""
        leaving, self.mode = self.mode, mode
        if leaving == "silent" or mode == "refuse":
            self._cut()
        if mode == "refuse" and self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        elif mode != "refuse" and self._server is None:
            await self.start()

    async def aclose(self) -> None:
        await self.switch("refuse")
        for handler in self._handlers:
            handler.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def __aenter__(self) -> TcpProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _cut(self) -> None:
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self._open.add(client_writer)
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            if self.mode == "silent":
                await _swallow(client_reader)
                return
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            self._open.add(upstream_writer)
            await asyncio.gather(self._pump(client_reader, upstream_writer),
                                 self._pump(upstream_reader, client_writer), return_exceptions=True)
            self._open.discard(upstream_writer)
        finally:
            self._open.discard(client_writer)
            self._handlers.discard(handler)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(65536):
                if self.mode == "forward":  # silent: dropped, as a dead network would
                    writer.write(chunk)
                    await writer.drain()
        writer.close()


async def _swallow(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(ConnectionError):
        while await reader.read(65536):
            pass
