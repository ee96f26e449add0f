"""A hostile provider on loopback: a real aiohttp server that answers whatever a test scripts.

Where ``provmw.testing.FakeProvider`` plays an honest provider with faults, this one lies,
floods, drips and echoes. Every POST, to any path, gets the current script (the same answer
until the next script), and is recorded in ``requests``::

    async with HostileProvider() as hostile:            # or the ``hostile`` fixture
        config = ProviderConfig(identifier="h", provider="openai", model="m",
                                base_url=hostile.openai_base_url, api_key="sk-...")
        hostile.answer('{"choices": "x"}')               # raw text, status 200, JSON content type
        hostile.answer(b"<html>oops</html>", status=502, content_type="text/html")
        hostile.echo(status=401)                         # an error body quoting every request header
        hostile.flood(1 << 30)                           # a 1 GiB body, generated as it is sent
        hostile.endless_line()                           # an SSE line with no newline, for ever
        hostile.keepalives(every_s=0.01)                 # ": ping" SSE comments for ever, no event
        hostile.drip([b"data: {}\\n\\n", ...], every_s=0.01)   # these pieces, one by one
        hostile.requests[-1].headers["Authorization"]

Endless answers stop when the client hangs up. Nothing large is ever held in memory: a
flood writes one 64 KiB block again and again, under the transport's back-pressure.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence

import attrs
from aiohttp import web

__all__ = ["HostileProvider", "Seen"]

_BLOCK = 64 * 1024
_SSE = "text/event-stream"
_JSON = "application/json"

Writer = Callable[[web.StreamResponse, "Seen"], Awaitable[None]]


@attrs.frozen
class Seen:
    """One request the server received."""

    path: str
    query: str
    headers: Mapping[str, str]
    body: bytes


@attrs.frozen
class _Script:
    status: int
    headers: Mapping[str, str]
    write: Writer


class HostileProvider:
    """A loopback server whose every answer is scripted by the test, bytes and timing included."""

    def __init__(self) -> None:
        self.requests: list[Seen] = []
        self._script = _Script(200, {"Content-Type": _JSON}, _fixed(b"{}"))
        self._runner: web.AppRunner | None = None
        self._port = 0

    @property
    def url(self) -> str:
        """The server root, also the Anthropic base URL."""
        return f"http://127.0.0.1:{self._port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    async def __aenter__(self) -> HostileProvider:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self._port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def answer(self, body: bytes | str, *, status: int = 200, content_type: str = _JSON,
               headers: Mapping[str, str] | None = None) -> None:
        """Answer every request with exactly ``body`` (text is sent as UTF-8)."""
        raw = body.encode() if isinstance(body, str) else body
        self._set(status, content_type, headers, _fixed(raw))

    def sse(self, *events: str, status: int = 200) -> None:
        """Answer with these ``data:`` events, each ended by a blank line."""
        self.answer("".join(f"data: {e}\n\n" for e in events), status=status, content_type=_SSE)

    def echo(self, *, status: int = 401, as_json: bool = True) -> None:
        """Answer with an error quoting the request's URL and every header, as leaky servers do."""
        self._set(status, _JSON if as_json else "text/plain", None, _echo(as_json))

    def flood(self, total_bytes: int, *, status: int = 200, content_type: str = _JSON,
              declare_length: bool = False, prefix: bytes = b"") -> None:
        """Answer with ``total_bytes`` of ``prefix`` then spaces, chunked unless ``declare_length``."""
        headers = {"Content-Length": str(total_bytes)} if declare_length else None
        self._set(status, content_type, headers, _flood(prefix, total_bytes))

    def endless_line(self, prefix: bytes = b"data: ") -> None:
        """An SSE answer: ``prefix`` then ``x`` for ever, never a newline."""
        self._set(200, _SSE, None, _flood(prefix, None, filler=b"x"))

    def keepalives(self, *, every_s: float = 0.01, comment: bytes = b": ping\n\n") -> None:
        """An SSE answer of ``comment`` every ``every_s`` seconds, for ever, never an event."""
        self._set(200, _SSE, None, _drip(None, comment, every_s))

    def drip(self, pieces: Sequence[bytes], *, every_s: float = 0.01, content_type: str = _SSE) -> None:
        """Send ``pieces`` one by one, ``every_s`` apart, then end the answer."""
        self._set(200, content_type, None, _drip(pieces, b"", every_s))

    def _set(self, status: int, content_type: str, headers: Mapping[str, str] | None, write: Writer) -> None:
        self._script = _Script(status, {"Content-Type": content_type, **(headers or {})}, write)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(Seen(request.path, request.query_string, dict(request.headers), body))
        script = self._script
        response = web.StreamResponse(status=script.status, headers=script.headers)
        try:
            await response.prepare(request)
            await script.write(response, self.requests[-1])
            await response.write_eof()
        except ConnectionError:
            pass  # the client hung up: the endless answers end here
        return response


def _fixed(raw: bytes) -> Writer:
    async def write(response: web.StreamResponse, seen: Seen) -> None:
        await response.write(raw)
    return write


def _echo(as_json: bool) -> Writer:
    async def write(response: web.StreamResponse, seen: Seen) -> None:
        lines = [f"url: {seen.path}?{seen.query}", *(f"{k}: {v}" for k, v in seen.headers.items())]
        text = "\n".join(lines)
        body = json.dumps({"error": {"type": "invalid_request_error", "message": text}}) if as_json else text
        await response.write(body.encode())
    return write


def _flood(prefix: bytes, total_bytes: int | None, filler: bytes = b" ") -> Writer:
    block = filler * _BLOCK

    async def write(response: web.StreamResponse, seen: Seen) -> None:
        await response.write(prefix)
        left = None if total_bytes is None else total_bytes - len(prefix)
        while left is None or left > 0:
            piece = block if left is None or left >= _BLOCK else block[:left]
            await response.write(piece)
            left = None if left is None else left - len(piece)
    return write


def _drip(pieces: Sequence[bytes] | None, forever: bytes, every_s: float) -> Writer:
    async def write(response: web.StreamResponse, seen: Seen) -> None:
        for piece in pieces if pieces is not None else itertools.repeat(forever):
            await response.write(piece)
            await asyncio.sleep(every_s)
    return write

