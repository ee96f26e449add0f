"""The HTTP layer every provider adapter uses: one client per manager, one error boundary.

``HttpClient`` posts JSON and reads JSON or server-sent events; it knows nothing of
providers. An adapter wraps its calls in ``wire_errors``, which translates whatever the
layer below raises into the ``ProviderError`` tree, as httpx's ``map_httpcore_exceptions()``
does for its transports::

    with wire_errors(ERROR_CODES, provider=self.name, model=config.model):
        data = await http.post_json(url, body, headers)

- ``HttpStatusError`` (a non-2xx answer): a code in the body through the adapter's
  ``ErrorCodes``, else the status through ``STATUS_ERRORS``; retry hints from the headers.
- ``InBandError`` (an error event inside a 2xx stream): a code in it through the adapter's
  ``ErrorCodes``, else ``ProviderUnavailableError``.
- ``NotJsonError`` (a 2xx body that is not JSON): ``MalformedResponseError``.
- ``ReadRefused`` (a read stopped at a ``ReadLimits`` limit): ``ResponseTooLargeError``, or
  ``ProviderTimeoutError`` for a stream idle past ``stream_idle_s``.
- aiohttp, OS and timeout exceptions: through ``EXCEPTION_ERRORS``, searched along the MRO;
  those in ``NEVER_SENT`` (no connection was ever made) set ``never_sent`` on the error.

Calls carry no timer: the manager bounds each attempt, and a stream's time to its first
chunk and between chunks. The time between a stream's events is bounded by ``stream_idle_s``
too: comments and ``ping`` events do not count.
Every read is bounded in size (``ReadLimits``), and ``decode_json`` refuses what is not
strict JSON (``NaN``, ``Infinity``, nesting deeper than the interpreter can decode).
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs

from provmw._reads import ERROR_BODY_BYTES, ReadLimits, ReadRefused, read_capped
from provmw._redact import masked_url
from provmw._timers import WaitLimit
from provmw.errors import (
    AuthenticationError,
    ConfigurationError,
    ContentPolicyError,
    ContextLengthExceededError,
    InvalidRequestError,
    MalformedResponseError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
)
from provmw.providers._retry_hints import retry_hints
from provmw.providers._sse import SSEDecoder, SSEEvent

if TYPE_CHECKING:
    import aiohttp
    from aiohttp.abc import AbstractResolver
    from yarl import URL

    EXCEPTION_ERRORS: Mapping[type[BaseException], tuple[type[ProviderError], str]]
    NEVER_SENT: tuple[type[BaseException], ...]

__all__ = [
    "Body",
    "COMMON_CODES",
    "EXCEPTION_ERRORS",
    "STATUS_ERRORS",
    "ErrorCodes",
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
    "decode_json",
    "malformed",
    "plain_json",
    "retry_hints",
    "wire_errors",
]

STATUS_ERRORS: Mapping[int, type[ProviderError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    403: AuthenticationError,
    404: InvalidRequestError,
    408: ProviderTimeoutError,
    409: ProviderUnavailableError,
    413: InvalidRequestError,
    422: InvalidRequestError,
    429: RateLimitError,
    500: ProviderUnavailableError,
    502: ProviderUnavailableError,
    503: ProviderUnavailableError,
    504: ProviderTimeoutError,
    529: ProviderUnavailableError,
}

# Error codes found in bodies, normalised across providers by each adapter's extractor.
COMMON_CODES: Mapping[str, type[ProviderError]] = {
    "context_length_exceeded": ContextLengthExceededError,
    "content_policy_violation": ContentPolicyError,
    "content_filter": ContentPolicyError,
    "insufficient_quota": RateLimitError,
    "rate_limit_exceeded": RateLimitError,
}

_EVENT_MESSAGE_CHARS = 2_000
# Events that only say "still here" (Anthropic's ``ping``): like comments, they do not reset
# the idle limit, or a server could hold a stream open for ever without an answer.
KEEPALIVE_EVENTS = frozenset({"ping"})
# A ``yarl.URL(..., encoded=True)`` is sent exactly as written, where a string's path is
# normalised first (``%3A`` becomes ``:``): an adapter that signs its path needs the former.
Url: TypeAlias = "str | URL"
# ``bytes`` are sent as they are: an adapter that signs its body sends the bytes it signed.
Body = Mapping[str, Any] | bytes
_URL_QUERY = re.compile(r"(https?://[^\s?'\"]+)\?[^\s'\"]*")


def __getattr__(name: str) -> Any:
    # The tables name aiohttp's exceptions: they load with aiohttp, at the first request.
    if name in ("EXCEPTION_ERRORS", "NEVER_SENT"):
        from provmw import _foreign_errors

        return getattr(_foreign_errors, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class HttpStatusError(Exception):
    """A non-2xx answer; ``wire_errors`` turns it into a ``ProviderError``."""

    def __init__(self, status: int, body: bytes, headers: Mapping[str, str], url: str = "") -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body
        self.headers = headers
        self.url = url


class InBandError(Exception):
    """An error event inside a 2xx stream (``body`` is its data); ``wire_errors`` maps it as it
    maps an error body: a code the adapter knows, else ``ProviderUnavailableError``."""

    def __init__(self, body: str | bytes) -> None:
        super().__init__("error event in the stream")
        self.body = body.encode() if isinstance(body, str) else body


class NotJsonError(Exception):
    """A 2xx answer whose body is not JSON; ``wire_errors`` turns it into a ``MalformedResponseError``."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status} body is not JSON ({len(body)} bytes)")
        self.status = status
        self.body = body


@attrs.frozen
class ErrorCodes:
    """How one provider writes errors: extract (code, message) from a body, map codes."""

    extract: Callable[[Any], tuple[str | None, str | None]]
    codes: Mapping[str, type[ProviderError]] = COMMON_CODES
    not_found_hint: str = ""  # added to a 404's message: the usual cause is a base_url missing a path part


def wire_errors(codes: ErrorCodes, *, provider: str, model: str) -> WireErrors:
    """Translate what the HTTP layer raises inside the block into the ``ProviderError`` tree."""
    return WireErrors(codes, provider, model)


class WireErrors:
    """The context manager ``wire_errors`` returns: a class, as it runs around every request (a
    generator's context manager cost three times as much)."""

    __slots__ = ("codes", "model", "provider")

    def __init__(self, codes: ErrorCodes, provider: str, model: str) -> None:
        self.codes, self.provider, self.model = codes, provider, model

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is None or not isinstance(exc, Exception):
            return
        provider, model = self.provider, self.model
        if isinstance(exc, HttpStatusError):
            raise _status_error(exc, self.codes, provider, model) from None
        if isinstance(exc, InBandError):
            raise _in_band_error(exc, self.codes, provider, model) from None
        if isinstance(exc, NotJsonError):
            raise MalformedResponseError(f"response body is not JSON ({len(exc.body)} bytes)",
                                         provider=provider, model=model, status=exc.status) from None
        if isinstance(exc, ReadRefused):
            raise exc.error(provider, model) from None
        from provmw._foreign_errors import MAPPED  # loaded already once a request was made

        if isinstance(exc, MAPPED):
            raise _foreign_error(exc, provider, model) from None


def _status_error(exc: HttpStatusError, codes: ErrorCodes, provider: str, model: str) -> ProviderError:
    code, message = _extract(exc.body, codes)
    cls = codes.codes.get(code or "") or STATUS_ERRORS.get(exc.status)
    if cls is None:
        cls = InvalidRequestError if 400 <= exc.status < 500 else ProviderUnavailableError
    after, should = retry_hints(exc.headers)
    text = message or f"HTTP {exc.status} with no error message"
    if exc.status == 404 and exc.url:
        # A bare 404 is almost always a wrong URL: show it (masked) and the adapter's hint.
        text += f" (404 from {masked_url(exc.url)}{codes.not_found_hint})"
    return cls(text, provider=provider, model=model, status=exc.status, retry_after_s=after,
               should_retry=should, code=code)


def _in_band_error(exc: InBandError, codes: ErrorCodes, provider: str, model: str) -> ProviderError:
    try:
        code, message = codes.extract(decode_json(exc.body))
        shaped = isinstance(code, str | None) and isinstance(message, str | None)
    except (ValueError, TypeError, AttributeError, KeyError, LookupError):
        shaped = False
    if not shaped:
        return MalformedResponseError("an error event in the stream does not have the documented shape",
                                      provider=provider, model=model)
    # After an HTTP 200, an error event is the server failing mid-answer ("overloaded").
    cls = codes.codes.get(code or "", ProviderUnavailableError)
    text = message or "no message"
    if len(text) > _EVENT_MESSAGE_CHARS:  # a hostile event may hold megabytes: an error message need not
        text = text[:_EVENT_MESSAGE_CHARS] + f"... ({len(text)} characters)"
    return cls(f"error event in the stream: {text}", provider=provider, model=model, code=code)


def _extract(body: bytes, codes: ErrorCodes) -> tuple[str | None, str | None]:
    try:
        code, message = codes.extract(decode_json(body))
    except (ValueError, TypeError, AttributeError, KeyError, LookupError):
        snippet = body[:200].decode("utf-8", errors="replace").strip()
        return None, snippet or None
    # A hostile body may put anything there: only text is kept, so only text needs scrubbing.
    return _text_or_none(code), _text_or_none(message)


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _foreign_error(exc: BaseException, provider: str, model: str) -> ProviderError:
    from provmw._foreign_errors import EXCEPTION_ERRORS, NEVER_SENT

    error_cls, what = next(EXCEPTION_ERRORS[cls] for cls in type(exc).__mro__ if cls in EXCEPTION_ERRORS)
    detail = _URL_QUERY.sub(r"\1?…", str(exc))  # never echo query strings
    message = f"{what} ({type(exc).__name__}: {detail})" if detail else what
    status = getattr(exc, "status", None)
    return error_cls(message, provider=provider, model=model,
                     status=status if isinstance(status, int) and status else None,
                     never_sent=isinstance(exc, NEVER_SENT))


def malformed(provider: str, model: str, exc: BaseException) -> MalformedResponseError:
    """The error for a 2xx body that is JSON but not of the documented shape."""
    return MalformedResponseError(
        f"response does not have the documented shape ({type(exc).__name__}: {exc})",
        provider=provider, model=model,
    )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Built once: ``json.loads`` with any option builds a new decoder per call. It holds no state.
_STRICT = json.JSONDecoder(parse_constant=_no_constant)


def decode_json(raw: bytes | str) -> Any:
    """Strict JSON: ``NaN`` and ``Infinity`` refused, and nesting too deep to decode is a ``ValueError``."""
    try:
        text = raw if isinstance(raw, str) else raw.decode(json.detect_encoding(raw), "surrogatepass")
        return _STRICT.decode(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


_SCALARS = frozenset({str, int, float, bool, type(None)})


def plain_json(value: Any) -> Any:
    """``value`` (frozen mappings included) as plain JSON types."""
    if type(value) in _SCALARS:  # most options: nothing to convert, and a round trip per option shows
        return value
    if not value and isinstance(value, Mapping | list | tuple):  # no extra_body: every call asks for {}
        return {} if isinstance(value, Mapping) else []
    return json.loads(json.dumps(value, default=dict))


def _encode(body: Mapping[str, Any]) -> bytes:
    # NaN and infinity are not JSON: Python would write them, a provider would choke on them.
    try:
        return json.dumps(body, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (ValueError, TypeError, RecursionError) as exc:
        raise ConfigurationError(f"the request body cannot be sent as JSON: {exc}") from None


def _payload(body: Body) -> bytes:
    return body if isinstance(body, bytes) else _encode(body)


class HttpClient:
    """The manager's HTTP client: one aiohttp session, opened lazily in the running loop."""

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
        async with self.session.post(url, data=_payload(body), headers=headers, allow_redirects=False,
                                     timeout=_no_timer()) as response:
            if response.status >= 300:
                raise await _status_of(response, self.limits)
            raw = await read_capped(response.content, response.content_length, self.limits.max_body_bytes)
        try:
            return decode_json(raw)
        except ValueError:
            raise NotJsonError(response.status, raw) from None

    async def post_sse(self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], *,
                       read_timeout_s: float | None = None) -> AsyncIterator[SSEEvent]:
        """POST ``body`` and yield the server-sent events of the 2xx answer.

        The manager bounds a stream's attempt (to its first chunk, then between chunks);
        ``read_timeout_s``, when given, also bounds the connect and each socket read.
        """
        timeout = _read_timer(read_timeout_s)
        async with self.session.post(url, data=_encode(body), headers=headers, allow_redirects=False,
                                     timeout=timeout) as response:
            if response.status >= 300:
                raise await _status_of(response, self.limits)
            async for event in _events(response.content, self.limits):
                yield event

    async def post_stream(self, url: Url, body: Body, headers: Mapping[str, str], *,
                          read_timeout_s: float | None = None) -> AsyncGenerator[bytes, None]:
        """POST ``body`` and yield the raw chunks of the 2xx answer, for a stream in a framing of its
        own (AWS event streams): the caller decodes it and bounds each event's size and the idle time.
        ``read_timeout_s`` is as for ``post_sse``."""
        timeout = _read_timer(read_timeout_s)
        async with self.session.post(url, data=_payload(body), headers=headers, allow_redirects=False,
                                     timeout=timeout) as response:
            if response.status >= 300:
                raise await _status_of(response, self.limits)
            while chunk := await response.content.readany():
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
    """The events of a stream, refused once ``stream_idle_s`` passes with no event but keepalives."""
    decoder = SSEDecoder(limits.max_event_bytes)
    limit = WaitLimit()
    idle_until = limit.loop_time() + limits.stream_idle_s
    try:
        while chunk := await _read_before(content, limit, idle_until, limits.stream_idle_s):
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
