"""The error boundary of the HTTP layer: what it raises, translated into the ``ProviderError`` tree.

An adapter wraps its calls in ``wire_errors``, as httpx's ``map_httpcore_exceptions()`` does
for its transports:

- ``HttpStatusError`` (a non-2xx answer): a code in the body through the adapter's
  ``ErrorCodes``, else the status through ``STATUS_ERRORS``; retry hints from the headers.
- ``InBandError`` (an error event inside a 2xx stream): a code in it through the adapter's
  ``ErrorCodes``, else ``ProviderUnavailableError``.
- ``NotJsonError`` (a 2xx body that is not JSON): ``MalformedResponseError``.
- ``ReadRefused`` (a read stopped at a ``ReadLimits`` limit): ``ResponseTooLargeError``, or
  ``ProviderTimeoutError`` for a stream idle past ``stream_idle_s``.
- aiohttp, OS and timeout exceptions: through ``EXCEPTION_ERRORS``, searched along the MRO;
  those in ``NEVER_SENT`` (no connection was ever made) set ``never_sent`` on the error.

``provmw.http`` is the public face of all of it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from provmw._base.strict_json import decode_json
from provmw._transport.reads import ReadRefused
from provmw._transport.retry_hints import retry_hints
from provmw.errors import (
    AuthenticationError,
    ContentPolicyError,
    ContextLengthExceededError,
    InvalidRequestError,
    MalformedResponseError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
)
from provmw.scrubbing import CUT, masked_url

__all__ = [
    "COMMON_CODES",
    "STATUS_ERRORS",
    "ErrorCodes",
    "HttpStatusError",
    "InBandError",
    "NotJsonError",
    "WireErrors",
    "malformed",
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
_SNIPPET_BYTES = 200  # of a body that is not JSON, quoted in the error
_URL_QUERY = re.compile(r"(https?://[^\s?'\"]+)\?[^\s'\"]*")


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
        from provmw._transport.foreign_errors import MAPPED  # loaded already once a request was made

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
        text = text[:_EVENT_MESSAGE_CHARS] + f"{CUT} ({len(text)} characters)"
    return cls(f"error event in the stream: {text}", provider=provider, model=model, code=code)


def _extract(body: bytes, codes: ErrorCodes) -> tuple[str | None, str | None]:
    try:
        code, message = codes.extract(decode_json(body))
    except (ValueError, TypeError, AttributeError, KeyError, LookupError):
        snippet = body[:_SNIPPET_BYTES].decode("utf-8", errors="replace").strip()
        # Marked where it was cut, so that a secret cut there is masked though a hint follows (a 404).
        return None, (snippet + CUT if len(body) > _SNIPPET_BYTES else snippet) or None
    # A hostile body may put anything there: only text is kept, so only text needs scrubbing.
    return _text_or_none(code), _text_or_none(message)


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _foreign_error(exc: BaseException, provider: str, model: str) -> ProviderError:
    from provmw._transport.foreign_errors import EXCEPTION_ERRORS, NEVER_SENT

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
