"""The shared HTTP layer: one session per manager, JSON and SSE, and the wire-error table.

Every failure below the adapters is translated here, at one boundary, into the
``ProviderError`` tree: HTTP statuses through ``STATUS_ERRORS``, provider error codes in
the body through each adapter's ``ErrorCodes``, and aiohttp/OS exceptions through
``EXCEPTION_ERRORS``. Adapters never retry; the retry middleware decides.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
import attrs

from provmw.errors import (
    AuthenticationError,
    ContentPolicyError,
    ContextLengthExceededError,
    InvalidRequestError,
    MalformedResponseError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
)
from provmw.providers._sse import SSEDecoder, SSEEvent

__all__ = [
    "COMMON_CODES",
    "EXCEPTION_ERRORS",
    "STATUS_ERRORS",
    "ErrorCodes",
    "HttpClient",
    "error_for_exception",
    "malformed",
    "plain_json",
    "error_for_status",
    "retry_hints",
]

MAX_RETRY_HINT_S = 24 * 3600.0  # a longer hint is a broken header, not advice

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

# Searched along the exception's MRO; bare aiohttp.ClientError is deliberately absent so
# that a new aiohttp exception fails the completeness test instead of passing silently.
EXCEPTION_ERRORS: Mapping[type[BaseException], tuple[type[ProviderError], str]] = {
    aiohttp.ClientConnectorDNSError: (ProviderConnectionError, "host name did not resolve"),
    aiohttp.ClientSSLError: (ProviderConnectionError, "TLS handshake failed"),
    aiohttp.ClientProxyConnectionError: (ProviderConnectionError, "proxy refused the connection"),
    aiohttp.ClientConnectorError: (ProviderConnectionError, "connection refused"),
    aiohttp.ClientConnectionResetError: (ProviderConnectionError, "connection reset"),
    aiohttp.ClientOSError: (ProviderConnectionError, "connection failed"),
    aiohttp.ServerTimeoutError: (ProviderTimeoutError, "read timed out"),
    aiohttp.ServerDisconnectedError: (ProviderConnectionError, "server disconnected"),
    aiohttp.ServerFingerprintMismatch: (ProviderConnectionError, "certificate fingerprint mismatch"),
    aiohttp.ServerConnectionError: (ProviderConnectionError, "server connection failed"),
    aiohttp.ClientConnectionError: (ProviderConnectionError, "connection failed"),
    aiohttp.ClientPayloadError: (ProviderConnectionError, "connection dropped mid-body"),
    aiohttp.UploadAbortedError: (ProviderConnectionError, "upload aborted"),
    aiohttp.ContentTypeError: (MalformedResponseError, "unexpected content type"),
    aiohttp.TooManyRedirects: (InvalidRequestError, "too many redirects"),
    aiohttp.WSServerHandshakeError: (InvalidRequestError, "websocket handshake refused"),
    aiohttp.ClientHttpProxyError: (ProviderConnectionError, "proxy returned an error"),
    aiohttp.ClientResponseError: (ProviderUnavailableError, "bad response"),
    aiohttp.InvalidURL: (InvalidRequestError, "invalid URL"),
    aiohttp.NonHttpUrlClientError: (InvalidRequestError, "not an http(s) URL"),
    aiohttp.RedirectClientError: (InvalidRequestError, "bad redirect"),
    asyncio.TimeoutError: (ProviderTimeoutError, "timed out"),
    ConnectionError: (ProviderConnectionError, "connection failed"),
}

_URL_QUERY = re.compile(r"(https?://[^\s?'\"]+)\?[^\s'\"]*")


@attrs.frozen
class ErrorCodes:
    """How one provider writes errors: extract (code, message) from a body, map codes."""

    extract: Callable[[Any], tuple[str | None, str | None]]
    codes: Mapping[str, type[ProviderError]] = COMMON_CODES


def _finite(value: float) -> float | None:
    if math.isnan(value) or math.isinf(value) or value < 0 or value > MAX_RETRY_HINT_S:
        return None
    return value


def _parse_seconds(text: str) -> float | None:
    try:
        return _finite(float(text))
    except ValueError:
        return None


def retry_hints(headers: Mapping[str, str], now: float | None = None) -> tuple[float | None, bool | None]:
    """``(retry_after_s, should_retry)`` from response headers; bad values are ignored."""
    after: float | None = None
    if (ms := headers.get("retry-after-ms")) is not None and (parsed := _parse_seconds(ms)) is not None:
        after = parsed / 1000.0
    elif (value := headers.get("retry-after")) is not None:
        after = _parse_seconds(value)
        if after is None:
            after = _parse_http_date(value, time.time() if now is None else now)
    should = headers.get("x-should-retry", "").strip().lower()
    return after, {"true": True, "false": False}.get(should)


def _parse_http_date(value: str, now: float) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return _finite(max(0.0, when.timestamp() - now))


def error_for_status(status: int, body: bytes, headers: Mapping[str, str], codes: ErrorCodes,
                     provider: str, model: str) -> ProviderError:
    """The error a non-2xx response stands for."""
    code, message = _extract(body, codes)
    cls = codes.codes.get(code or "") or STATUS_ERRORS.get(status)
    if cls is None:
        cls = InvalidRequestError if 400 <= status < 500 else ProviderUnavailableError
    after, should = retry_hints(headers)
    text = message or f"HTTP {status} with no error message"
    return cls(text, provider=provider, model=model, status=status, retry_after_s=after,
               should_retry=should, code=code)


def _extract(body: bytes, codes: ErrorCodes) -> tuple[str | None, str | None]:
    try:
        return codes.extract(json.loads(body))
    except (ValueError, TypeError, AttributeError, KeyError):
        snippet = body[:200].decode("utf-8", errors="replace").strip()
        return None, snippet or None


def error_for_exception(exc: BaseException, provider: str, model: str) -> ProviderError:
    """The error a foreign exception (aiohttp, OS, timeout) stands for."""
    for cls in type(exc).__mro__:
        if cls in EXCEPTION_ERRORS:
            error_cls, what = EXCEPTION_ERRORS[cls]
            detail = _URL_QUERY.sub(r"\1?…", str(exc))  # never echo query strings
            message = f"{what} ({type(exc).__name__}: {detail})" if detail else what
            status = getattr(exc, "status", None)
            return error_cls(message, provider=provider, model=model,
                             status=status if isinstance(status, int) and status else None)
    raise TypeError(f"no mapping for {type(exc).__name__}") from exc


_MAPPED = tuple(EXCEPTION_ERRORS)


def malformed(provider: str, model: str, exc: BaseException) -> MalformedResponseError:
    """The error for a 2xx body that is JSON but not of the documented shape."""
    return MalformedResponseError(
        f"response does not have the documented shape ({type(exc).__name__}: {exc})",
        provider=provider, model=model,
    )


def plain_json(value: Any) -> Any:
    """``value`` (frozen mappings included) as plain JSON types."""
    return json.loads(json.dumps(value, default=dict))


class HttpClient:
    """The manager's one aiohttp session, created lazily inside the running loop."""

    def __init__(self, *, connector_limit: int = 100) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._connector_limit = connector_limit

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._connector_limit)
            self._session = aiohttp.ClientSession(connector=connector, raise_for_status=False)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    async def post_json(self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], *,
                        timeout_s: float, codes: ErrorCodes, provider: str, model: str) -> Any:
        """POST ``body`` as JSON and return the decoded 2xx answer, or raise a ``ProviderError``."""
        data = json.dumps(body, separators=(",", ":")).encode("utf-8")
        try:
            async with self.session.post(
                url, data=data, headers=headers, allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as response:
                raw = await response.read()
                if response.status >= 300:
                    raise error_for_status(response.status, raw, response.headers, codes, provider, model)
        except _MAPPED as exc:
            raise error_for_exception(exc, provider, model) from None
        try:
            return json.loads(raw)
        except ValueError:
            raise MalformedResponseError(
                f"response body is not JSON ({len(raw)} bytes)", provider=provider, model=model,
                status=response.status,
            ) from None

    async def post_sse(self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], *,
                       timeout_s: float, codes: ErrorCodes, provider: str,
                       model: str) -> AsyncIterator[SSEEvent]:
        """POST ``body`` and yield the server-sent events of the answer."""
        data = json.dumps(body, separators=(",", ":")).encode("utf-8")
        # A stream may run long: bound the wait for each read, not the whole answer.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
        try:
            async with self.session.post(url, data=data, headers=headers, allow_redirects=False,
                                         timeout=timeout) as response:
                if response.status >= 300:
                    raw = await response.read()
                    raise error_for_status(response.status, raw, response.headers, codes, provider, model)
                decoder = SSEDecoder()
                async for chunk in response.content.iter_any():
                    for event in decoder.feed(chunk):
                        yield event
                for event in decoder.flush():
                    yield event
        except _MAPPED as exc:
            raise error_for_exception(exc, provider, model) from None
