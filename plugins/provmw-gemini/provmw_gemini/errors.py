"""Gemini's error bodies onto provmw's error tree, with the retry hint Gemini puts in the body.

Gemini answers errors as Google APIs do::

    {"error": {"code": 429, "message": "...", "status": "RESOURCE_EXHAUSTED",
               "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "12s"}]}}

``status`` is the gRPC code name, the same after an HTTP error and in an error event of a
stream. Three cases hide under a broader status and are refined from the body: a key that is
not valid (400 ``INVALID_ARGUMENT`` with the ``ErrorInfo`` reason ``API_KEY_INVALID``), a
prompt longer than the model takes (400 ``INVALID_ARGUMENT``, "The input token count ...
exceeds the maximum"), and a per-day quota spent (429 with a ``QuotaFailure`` on a
``...PerDay...`` quota: waiting minutes will not help, so it is ``insufficient_quota``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

from provmw.errors import (
    AuthenticationError,
    InvalidRequestError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
)
from provmw.http import COMMON_CODES, ErrorCodes, HttpStatusError, decode_json, wire_errors

__all__ = ["ERROR_CODES", "extract_error", "gemini_errors", "retry_delay"]

_RPC = "type.googleapis.com/google.rpc."
_TOO_LONG = re.compile(r"input token count.*exceeds the maximum", re.IGNORECASE | re.DOTALL)
_DURATION = re.compile(r"\s*(\d{1,9}(?:\.\d{1,9})?)s\s*")  # google.protobuf.Duration in JSON: "12s", "0.5s"


def _error(body: Any) -> Mapping[str, Any]:
    # A stream read without ``alt=sse`` frames each answer in a JSON array, errors included.
    if isinstance(body, list) and len(body) == 1:
        body = body[0]
    error = body["error"]
    if not isinstance(error, Mapping):
        raise TypeError("error is not an object")
    return error


def _details(error: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    details = error.get("details")
    if not isinstance(details, list):
        return []
    return [d for d in details if isinstance(d, Mapping) and d.get("@type") == _RPC + kind]


def _per_day_quota(error: Mapping[str, Any]) -> bool:
    violations = [v for d in _details(error, "QuotaFailure") for v in d.get("violations") or ()]
    return any(isinstance(v, Mapping) and "PerDay" in str(v.get("quotaId", "")) for v in violations)


def extract_error(body: Any) -> tuple[str | None, str | None]:
    """``(code, message)`` of a Gemini error body, the code refined where the status is too broad."""
    error = _error(body)
    status, message = error.get("status"), error.get("message")
    if any(d.get("reason") == "API_KEY_INVALID" for d in _details(error, "ErrorInfo")):
        return "API_KEY_INVALID", message
    if status == "INVALID_ARGUMENT" and isinstance(message, str) and _TOO_LONG.search(message):
        return "context_length_exceeded", message
    if status == "RESOURCE_EXHAUSTED" and _per_day_quota(error):
        return "insufficient_quota", message
    return status, message


ERROR_CODES = ErrorCodes(
    extract=extract_error,
    codes={
        **COMMON_CODES,
        "API_KEY_INVALID": AuthenticationError,
        "UNAUTHENTICATED": AuthenticationError,
        "PERMISSION_DENIED": AuthenticationError,
        "INVALID_ARGUMENT": InvalidRequestError,
        "FAILED_PRECONDITION": InvalidRequestError,  # e.g. the free tier is not offered in the caller's region
        "OUT_OF_RANGE": InvalidRequestError,
        "NOT_FOUND": InvalidRequestError,
        "RESOURCE_EXHAUSTED": RateLimitError,
        "DEADLINE_EXCEEDED": ProviderTimeoutError,
        "INTERNAL": ProviderUnavailableError,
        "UNAVAILABLE": ProviderUnavailableError,
        "ABORTED": ProviderUnavailableError,
        "UNKNOWN": ProviderUnavailableError,
    },
    not_found_hint="; does base_url end in /v1beta?",
)


def retry_delay(body: bytes) -> str | None:
    """The seconds of the body's ``RetryInfo.retryDelay`` as text (``"12"``), or None."""
    try:
        delays = [d.get("retryDelay") for d in _details(_error(decode_json(body)), "RetryInfo")]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    match = next((m for d in delays if isinstance(d, str) and (m := _DURATION.fullmatch(d))), None)
    return match.group(1) if match else None


@contextlib.contextmanager
def _retry_info_as_header() -> Iterator[None]:
    """Give an error status the body's ``RetryInfo`` as a ``retry-after`` header, which
    ``wire_errors`` reads (and bounds) like any other; a header the server sent wins."""
    try:
        yield
    except HttpStatusError as exc:
        headers = {name.lower(): value for name, value in exc.headers.items()}
        delay = retry_delay(exc.body)
        if delay is None or "retry-after" in headers or "retry-after-ms" in headers:
            raise
        raise HttpStatusError(exc.status, exc.body, {**headers, "retry-after": delay}, exc.url) from None


@contextlib.contextmanager
def gemini_errors(model: str) -> Iterator[None]:
    """``wire_errors`` with Gemini's codes, and its body's retry hint."""
    with wire_errors(ERROR_CODES, provider="gemini", model=model), _retry_info_as_header():
        yield
