"""Bedrock's errors onto provmw's error tree: one table, one extractor.

AWS names an error by its type: in the ``x-amzn-errortype`` header of an error answer
(``ThrottlingException:http://internal.amazon.com/...``), else as ``__type`` or ``code``
in its JSON body, and inside a stream in the ``:exception-type`` header of an exception
message (``throttlingException``). ``error_type_header`` and ``in_band_error`` put each in
the body as ``__type``, so the one extractor below reads them all.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from provmw.errors import (
    AuthenticationError,
    ContentPolicyError,
    InvalidRequestError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
)
from provmw.http import COMMON_CODES, ErrorCodes, HttpStatusError, InBandError, decode_json

__all__ = ["ERROR_CODES", "error_type_header", "in_band_error"]

# A ValidationException whose message says the input is too long is a context-length error.
_CONTEXT_LENGTH_HINTS = ("input is too long", "prompt is too long", "too many input tokens", "context window",
                         "context length", "maximum context")


# AWS codes that mean what a common code means: a quota that waiting will not restore.
_SAME_AS = {"ServiceQuotaExceededException": "insufficient_quota"}


def _code(value: object) -> str | None:
    """``Prefix#ThrottlingException:uri`` and ``throttlingException`` both read ``ThrottlingException``."""
    if not isinstance(value, str) or not value:
        return None
    name = value.split(":", 1)[0].rsplit("#", 1)[-1]
    return name[:1].upper() + name[1:] if name.endswith("Exception") else name


def _extract_error(body: Any) -> tuple[str | None, str | None]:
    code = _code(body.get("__type") or body.get("code"))
    message = body.get("message") or body.get("Message")
    text = message.lower() if isinstance(message, str) else ""
    if code == "ValidationException" and any(hint in text for hint in _CONTEXT_LENGTH_HINTS):
        code = "context_length_exceeded"
    return _SAME_AS.get(code or "", code), message


ERROR_CODES = ErrorCodes(
    extract=_extract_error,
    codes={
        **COMMON_CODES,
        "ThrottlingException": RateLimitError,
        # The model is being loaded or scaled: another configuration may serve now, this one later.
        "ModelNotReadyException": ProviderUnavailableError,
        "ServiceUnavailableException": ProviderUnavailableError,
        "InternalServerException": ProviderUnavailableError,
        "ModelErrorException": ProviderUnavailableError,
        "ModelStreamErrorException": ProviderUnavailableError,
        # Rerank's (Agent Runtime): a service it depends on failed (424), or answered badly (502).
        "DependencyFailedException": ProviderUnavailableError,
        "BadGatewayException": ProviderUnavailableError,
        "ConflictException": InvalidRequestError,
        "ModelTimeoutException": ProviderTimeoutError,
        "ValidationException": InvalidRequestError,
        "ResourceNotFoundException": InvalidRequestError,
        "AccessDeniedException": AuthenticationError,
        "UnrecognizedClientException": AuthenticationError,
        "InvalidSignatureException": AuthenticationError,
        "IncompleteSignatureException": AuthenticationError,
        "MissingAuthenticationTokenException": AuthenticationError,
        "ExpiredTokenException": AuthenticationError,
        "GuardrailInterventionException": ContentPolicyError,
    },
    not_found_hint="; base_url is the endpoint root, e.g. https://bedrock-runtime.us-east-1.amazonaws.com",
)


@contextlib.contextmanager
def error_type_header() -> Iterator[None]:
    """Inside ``wire_errors``: an error answer's ``x-amzn-errortype`` header becomes its body's ``__type``."""
    try:
        yield
    except HttpStatusError as exc:
        raise _typed(exc) from None


def _typed(exc: HttpStatusError) -> HttpStatusError:
    code = _code(exc.headers.get("x-amzn-errortype"))
    if code is None:
        return exc
    return HttpStatusError(exc.status, json.dumps({**_body(exc.body), "__type": code}).encode(), exc.headers, exc.url)


def _body(raw: bytes) -> dict[str, Any]:
    try:
        body = decode_json(raw)
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    return {"message": raw[:200].decode("utf-8", errors="replace").strip()}


def in_band_error(kind: str | None, payload: bytes) -> InBandError:
    """The error for an exception message inside a stream: its type and its payload's message."""
    return InBandError(json.dumps({**_body(payload), "__type": kind}))
