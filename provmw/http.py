"""The HTTP layer every provider adapter uses: one client per manager, one error boundary.

``HttpClient`` posts JSON and reads JSON or server-sent events; it knows nothing of
providers. An adapter wraps its calls in ``wire_errors``, which translates whatever the
layer below raises into the ``ProviderError`` tree, as httpx's ``map_httpcore_exceptions()``
does for its transports (the tables and the translation live in ``provmw._transport.wire_errors``)::

    with wire_errors(ERROR_CODES, provider=self.name, model=config.model):
        data = await http.post_json(url, body, headers)

An adapter that reads the answer's headers (rate limits: ``openai_rate_limit``,
``anthropic_rate_limit``) posts with ``post_json_with_headers`` or ``post_sse_with_headers``.
Uploads go as multipart forms (``post_form``, a JSON answer); binary answers (speech) are read
with ``post_bytes``. Both are bounded and their errors mapped as ``post_json``'s are.

Calls carry no timer: the manager bounds each attempt, and a stream's time to its first
chunk and between chunks. The time between a stream's events is bounded by ``stream_idle_s``
too: comments and ``ping`` events do not count.
Every read is bounded in size (``ReadLimits``), and ``decode_json`` refuses what is not
strict JSON (``NaN``, ``Infinity``, nesting deeper than the interpreter can decode).
"""

from __future__ import annotations

import asyncio
import functools
import types
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from provmw._base.strict_json import decode_json, encode_body, plain_json
from provmw._base.timers import WaitLimit
from provmw._transport.rate_limits import anthropic_rate_limit, openai_rate_limit
from provmw._transport.reads import ERROR_BODY_BYTES, ReadLimits, ReadRefused, check_stream_size, read_capped
from provmw._transport.retry_hints import retry_hints
from provmw._transport.sse import SSEDecoder, SSEEvent
from provmw._transport.wire_errors import (
    COMMON_CODES,
    STATUS_ERRORS,
    ErrorCodes,
    HttpStatusError,
    InBandError,
    NotJsonError,
    WireErrors,
    malformed,
    wire_errors,
)

if TYPE_CHECKING:
    import aiohttp
    from aiohttp.abc import AbstractResolver
    from yarl import URL

    from provmw.errors import ProviderError

    EXCEPTION_ERRORS: Mapping[type[BaseException], tuple[type[ProviderError], str]]
    NEVER_SENT: tuple[type[BaseException], ...]

__all__ = [
    "Body",
    "COMMON_CODES",
    "EXCEPTION_ERRORS",
    "STATUS_ERRORS",
    "ErrorCodes",
    "FormFile",
    "HttpClient",
    "HttpStatusError",
    "InBandError",
    "KEEPALIVE_EVENTS",
    "NEVER_SENT",
    "NotJsonError",
    "ReadLimits",
    "SSEEvent",
    "Url",
    "WireErrors",
    "anthropic_rate_limit",
    "decode_json",
    "malformed",
    "openai_rate_limit",
    "plain_json",
    "retry_hints",
    "wire_errors",
]

# Events that only say "still here" (Anthropic's ``ping``): like comments, they do not reset
# the idle limit, or a server could hold a stream open for ever without an answer.
KEEPALIVE_EVENTS = frozenset({"ping"})
# A ``yarl.URL(..., encoded=True)`` is sent exactly as written, where a string's path is
# normalised first (``%3A`` becomes ``:``): an adapter that signs its path needs the former.
Url: TypeAlias = "str | URL"
# ``bytes`` are sent as they are: an adapter that signs its body sends the bytes it signed.
Body = Mapping[str, Any] | bytes
# A file of a multipart form: its name, its bytes and their media type.
FormFile = tuple[str, bytes, str]
_NO_HEADERS: Mapping[str, str] = types.MappingProxyType({})


def __getattr__(name: str) -> Any:
    # The tables name aiohttp's exceptions: they load with aiohttp, at the first request.
    if name in ("EXCEPTION_ERRORS", "NEVER_SENT"):
        from provmw._transport import foreign_errors as _foreign_errors

        return getattr(_foreign_errors, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _payload(body: Body) -> bytes:
    return body if isinstance(body, bytes) else encode_body(body)


def _without_content_type(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in headers.items() if name.lower() != "content-type"}


class HttpClient:
    """The manager's HTTP client: one aiohttp session, opened lazily in the running loop.

    A subclass that overrides ``post_json`` (or ``post_sse``) but not its ``_with_headers`` twin
    keeps its behaviour for adapters that call the twin: the twin goes through the override, and
    the answer comes with no headers.
    """

    _plain_json = False  # set per subclass: post_json overridden, post_json_with_headers not
    _plain_sse = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Decided once per class; a twin a subclass overrides itself never reads these.
        cls._plain_json = cls.post_json is not HttpClient.post_json and \
            cls.post_json_with_headers is HttpClient.post_json_with_headers
        cls._plain_sse = cls.post_sse is not HttpClient.post_sse and \
            cls.post_sse_with_headers is HttpClient.post_sse_with_headers

    def __init__(self, *, connector_limit: int = 100, resolver: AbstractResolver | None = None,
                 limits: ReadLimits | None = None) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._connector_limit = connector_limit
        self._resolver = resolver  # a resolver of its own keeps its own answers: no connector DNS cache
        self.limits = limits if limits is not None else ReadLimits()

    @property
    def session(self) -> aiohttp.ClientSession:
        """The open session; the first use opens it in the running loop."""
        if self._session is None or self._session.closed:
            import aiohttp  # about 90 ms: paid by the first request, not by import provmw

            connector = aiohttp.TCPConnector(limit=self._connector_limit, resolver=self._resolver,
                                             use_dns_cache=self._resolver is None)
            self._session = aiohttp.ClientSession(connector=connector, raise_for_status=False,
                                                  timeout=_no_timer())
        return self._session

    async def aclose(self) -> None:
        """Close the session; a later call opens a new one."""
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    async def post_json(self, url: Url, body: Body, headers: Mapping[str, str]) -> Any:
        """POST ``body`` as JSON and return the decoded 2xx answer, else raise ``HttpStatusError``."""
        return (await self._post_json(url, body, headers))[0]

    async def post_json_with_headers(self, url: Url, body: Body,
                                     headers: Mapping[str, str]) -> tuple[Any, Mapping[str, str]]:
        """As ``post_json``, with the answer's headers (case-insensitive)."""
        if self._plain_json:
            return await self.post_json(url, body, headers), _NO_HEADERS
        return await self._post_json(url, body, headers)

    async def _post_json(self, url: Url, body: Body | aiohttp.FormData,
                         headers: Mapping[str, str]) -> tuple[Any, Mapping[str, str]]:
        raw, status, answer_headers = await self._post_read(url, body, headers)
        try:
            return decode_json(raw), answer_headers
        except ValueError:
            raise NotJsonError(status, raw) from None

    async def post_form(self, url: Url, fields: Mapping[str, str], files: Mapping[str, FormFile],
                        headers: Mapping[str, str]) -> tuple[Any, Mapping[str, str]]:
        """POST a multipart form (each file: its name, bytes and media type) and return the decoded
        2xx answer and its headers, as ``post_json_with_headers``. A Content-Type in ``headers`` is
        dropped: the form's own carries its boundary."""
        import aiohttp

        form = aiohttp.FormData(default_to_multipart=True)
        for name, value in fields.items():
            form.add_field(name, value)
        for name, (filename, data, media_type) in files.items():
            form.add_field(name, data, filename=filename, content_type=media_type)
        return await self._post_json(url, form, _without_content_type(headers))

    async def post_bytes(self, url: Url, body: Body,
                         headers: Mapping[str, str]) -> tuple[bytes, str, Mapping[str, str]]:
        """POST ``body`` as JSON and return the 2xx answer's raw bytes (bounded as a JSON body is), its
        Content-Type and its headers: for binary answers (speech)."""
        raw, _, answer_headers = await self._post_read(url, body, headers)
        return raw, answer_headers.get("Content-Type", ""), answer_headers

    async def _post_read(self, url: Url, body: Body | aiohttp.FormData,
                         headers: Mapping[str, str]) -> tuple[bytes, int, Mapping[str, str]]:
        data = body if not isinstance(body, Mapping | bytes) else _payload(body)
        async with self.session.post(url, data=data, headers=headers, allow_redirects=False,
                                     timeout=_no_timer()) as response:
            if response.status >= 300:
                raise await _status_of(response, self.limits)
            raw = await read_capped(response.content, response.content_length, self.limits.max_body_bytes)
        return raw, response.status, response.headers

    def post_sse(self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], *,
                 read_timeout_s: float | None = None) -> AsyncIterator[SSEEvent]:
        """POST ``body`` and yield the server-sent events of the 2xx answer.

        The manager bounds a stream's attempt (to its first chunk, then between chunks);
        ``read_timeout_s``, when given, also bounds the connect and each socket read.
        """
        return self._post_sse(url, body, headers, read_timeout_s, None)

    def post_sse_with_headers(self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], *,
                              on_headers: Callable[[Mapping[str, str]], None],
                              read_timeout_s: float | None = None) -> AsyncIterator[SSEEvent]:
        """As ``post_sse``; ``on_headers`` gets the 2xx answer's headers once it opens, before its events."""
        if self._plain_sse:
            return self.post_sse(url, body, headers, read_timeout_s=read_timeout_s)
        return self._post_sse(url, body, headers, read_timeout_s, on_headers)

    async def _post_sse(self, url: str, body: Mapping[str, Any], headers: Mapping[str, str],
                        read_timeout_s: float | None,
                        on_headers: Callable[[Mapping[str, str]], None] | None) -> AsyncIterator[SSEEvent]:
        timeout = _read_timer(read_timeout_s)
        async with self.session.post(url, data=encode_body(body), headers=headers, allow_redirects=False,
                                     timeout=timeout) as response:
            if response.status >= 300:
                raise await _status_of(response, self.limits)
            if on_headers is not None:
                on_headers(response.headers)
            async for event in _events(response.content, self.limits):
                yield event

    async def post_stream(self, url: Url, body: Body, headers: Mapping[str, str], *,
                          read_timeout_s: float | None = None) -> AsyncGenerator[bytes, None]:
        """POST ``body`` and yield the raw chunks of the 2xx answer, for a stream in a framing of its
        own (AWS event streams): the caller decodes it and bounds each event's size and the idle time;
        the stream's whole size is bounded here. ``read_timeout_s`` is as for ``post_sse``."""
        timeout = _read_timer(read_timeout_s)
        async with self.session.post(url, data=_payload(body), headers=headers, allow_redirects=False,
                                     timeout=timeout) as response:
            if response.status >= 300:
                raise await _status_of(response, self.limits)
            size = 0
            while chunk := await response.content.readany():
                size += len(chunk)
                check_stream_size(size, self.limits)
                yield chunk


@functools.cache
def _no_timer() -> aiohttp.ClientTimeout:
    """The manager bounds each attempt; aiohttp's own default (300 s total) must not cut one short."""
    import aiohttp

    return aiohttp.ClientTimeout(total=None)


def _read_timer(read_timeout_s: float | None) -> aiohttp.ClientTimeout:
    """No timer (the manager bounds streams), or one on the connect and each socket read."""
    if read_timeout_s is None:
        return _no_timer()
    import aiohttp

    return aiohttp.ClientTimeout(total=None, sock_connect=read_timeout_s, sock_read=read_timeout_s)


async def _status_of(response: aiohttp.ClientResponse, limits: ReadLimits) -> HttpStatusError:
    """The error for a non-2xx answer; its body is cut at ``ERROR_BODY_BYTES``, never refused."""
    limit = min(limits.max_body_bytes, ERROR_BODY_BYTES)
    body = await read_capped(response.content, response.content_length, limit, truncate=True)
    return HttpStatusError(response.status, body, response.headers, str(response.url))


async def _events(content: aiohttp.StreamReader, limits: ReadLimits) -> AsyncIterator[SSEEvent]:
    """The events of a stream, refused once ``stream_idle_s`` passes with no event but keepalives,
    or once its bytes pass ``max_stream_bytes``."""
    decoder = SSEDecoder(limits.max_event_bytes)
    limit = WaitLimit()
    idle_until = limit.loop_time() + limits.stream_idle_s
    size = 0
    try:
        while chunk := await _read_before(content, limit, idle_until, limits.stream_idle_s):
            size += len(chunk)
            check_stream_size(size, limits)
            for event in decoder.feed(chunk):
                yield event
                if event.event not in KEEPALIVE_EVENTS:  # after the yield: a slow consumer is not an idle provider
                    idle_until = limit.loop_time() + limits.stream_idle_s
            if limit.loop_time() >= idle_until:  # a flood of comments may never leave the read waiting
                raise _idle(limits.stream_idle_s)
    finally:
        limit.close()
    for event in decoder.flush():
        yield event


async def _read_before(content: aiohttp.StreamReader, limit: WaitLimit, deadline: float, idle_s: float) -> bytes:
    limit.start(deadline)
    try:
        return await content.readany()
    except asyncio.CancelledError:
        if limit.expired():
            raise _idle(idle_s) from None
        raise
    finally:
        limit.stop()


def _idle(idle_s: float) -> ReadRefused:
    return ReadRefused(f"stream sent no event for {idle_s:g}s ([http] stream_idle_s)")
