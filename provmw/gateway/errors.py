"""What the gateway answers when a call fails: one table from the provmw error tree to an HTTP
status, written in each wire's envelope.

::

    GatewayRefusal                 the gateway's own: 401 key, 404 model, 413 body, 429 concurrency, 400 body
    BudgetExceededError            429, the bucket named, retry-after to its reset; x-should-retry: false
    RateLimitError (local or not)  429 with retry-after (an upstream quota exhausted: 503)
    CircuitOpenError, PoolUnavailableError, ProviderUnavailableError,
    BudgetUnavailableError, UsageLedgerUnavailableError            503 with retry-after when known
    FallbackExhaustedError         the last attempt's answer; 503 when that was one of unavailability
    ConfigurationError, InvalidRequestError, InvalidDataError,
    GuardRefusedError (the rule named)                             400
    AuthenticationError (upstream) 502: the operator's credentials, never the client's 401
    MalformedResponseError, StreamInterruptedError, StructuredOutputError                 502
    ProviderTimeoutError, DeadlineExceededError, TimeoutError     504
    anything else                  500 "internal error", logged here with its traceback, nothing shown

The SDKs act on the status and on ``retry-after-ms`` / ``retry-after`` (OpenAI's and Anthropic's
both read the first, precise, one; the second is whole seconds for everyone else).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math

import attrs
from aiohttp import web

from provmw import errors as e

__all__ = ["GatewayRefusal", "Refusal", "anthropic_error", "openai_error", "refusal_of", "retry_headers"]

log = logging.getLogger(__name__)


@attrs.frozen
class Refusal:
    """A failed call as the client sees it: status, OpenAI's error type and code, a message with
    nothing internal, and when to try again."""

    status: int
    kind: str
    message: str
    code: str | None = None
    param: str | None = None
    retry_after_s: float | None = None
    should_retry: bool | None = None


class GatewayRefusal(Exception):
    """The gateway itself refused the request (no key, unknown model, body too large...)."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


_UNAVAILABLE = (e.CircuitOpenError, e.ProviderUnavailableError, e.BudgetUnavailableError,
                e.UsageLedgerUnavailableError)
_UPSTREAM_BAD = (e.MalformedResponseError, e.StreamInterruptedError, e.StructuredOutputError)
_TIMEOUT = (e.ProviderTimeoutError, e.DeadlineExceededError, TimeoutError)
_INVALID = (e.ConfigurationError, e.InvalidRequestError, e.InvalidDataError)


def refusal_of(exc: BaseException) -> Refusal:
    """The client's view of ``exc`` (the table in this module's docstring)."""
    if isinstance(exc, GatewayRefusal):
        return exc.refusal
    if isinstance(exc, e.BudgetExceededError):
        return Refusal(429, "budget_exceeded", str(exc), "budget_exceeded",
                       retry_after_s=_seconds_to(exc.resets_at), should_retry=False)
    if isinstance(exc, e.RateLimitError) and not exc.quota_exhausted:
        return Refusal(429, "rate_limit_exceeded", _provider_message("rate limited", exc), "rate_limit_exceeded",
                       retry_after_s=exc.retry_after_s)
    if isinstance(exc, e.RateLimitError | e.AuthenticationError):
        # The operator's account (key or quota), not the client's: not their 401, not worth their retry.
        log.error("upstream refused the gateway's account: %s: %s", type(exc).__name__, exc)
        return Refusal(502 if isinstance(exc, e.AuthenticationError) else 503, "upstream_error",
                       f"the upstream provider {exc.provider or ''} refused the gateway's account".replace("  ", " "),
                       "upstream_account", should_retry=False)
    if isinstance(exc, e.FallbackExhaustedError):
        return _exhausted(exc)
    return _by_class(exc)


def _by_class(exc: BaseException) -> Refusal:
    if isinstance(exc, _UNAVAILABLE):
        after = getattr(exc, "retry_after_s", None)
        return Refusal(503, "service_unavailable", _provider_message("unavailable", exc), "service_unavailable",
                       retry_after_s=after)
    if isinstance(exc, _TIMEOUT):
        return Refusal(504, "timeout", _provider_message("timed out", exc), "timeout")
    if isinstance(exc, e.GuardRefusedError):
        return Refusal(400, "invalid_request_error", f"refused by guard rule {exc.rule!r} ({exc.stage})",
                       "guard_refused")
    if isinstance(exc, e.ContextLengthExceededError):
        return Refusal(400, "invalid_request_error", str(exc), "context_length_exceeded", "messages")
    if isinstance(exc, e.ContentPolicyError):
        return Refusal(400, "invalid_request_error", str(exc), "content_policy_violation")
    if isinstance(exc, _INVALID):
        return Refusal(400, "invalid_request_error", str(exc), "invalid_request")
    if isinstance(exc, _UPSTREAM_BAD):
        return Refusal(502, "upstream_error", _provider_message("answered badly", exc), "bad_gateway")
    log.error("internal error in the gateway", exc_info=exc)
    return Refusal(500, "server_error", "internal error", "internal_error")


def _exhausted(exc: e.FallbackExhaustedError) -> Refusal:
    sent = [a for a in exc.attempts if a.sent] or list(exc.attempts)
    last = refusal_of(sent[-1].error) if sent else Refusal(503, "service_unavailable", str(exc))
    if last.status < 429 or last.status == 502:
        return last
    afters = [after for a in exc.attempts if (after := getattr(a.error, "retry_after_s", None)) is not None]
    return Refusal(503, "service_unavailable", f"no configuration could answer: {last.message}",
                   "service_unavailable", retry_after_s=min(afters) if afters else None)


def _provider_message(what: str, exc: BaseException) -> str:
    if isinstance(exc, e.ProviderError):
        where = "/".join(p for p in (exc.provider, exc.model) if p)
        return f"upstream {where or 'provider'} {what}" + (f" (HTTP {exc.status})" if exc.status else "")
    return str(exc) or what


def _seconds_to(resets_at: str | None) -> float | None:
    if resets_at is None:
        return None
    try:
        when = dt.datetime.fromisoformat(resets_at)
    except ValueError:
        return None
    now = dt.datetime.now(when.tzinfo) if when.tzinfo else dt.datetime.now()
    return max(0.0, (when - now).total_seconds())


def retry_headers(refusal: Refusal) -> dict[str, str]:
    """``retry-after-ms`` (precise, the SDKs read it first), ``retry-after`` (whole seconds) and
    ``x-should-retry`` (the SDKs obey it) as ``refusal`` says."""
    headers: dict[str, str] = {}
    if refusal.retry_after_s is not None:
        headers["retry-after-ms"] = str(max(0, round(refusal.retry_after_s * 1000)))
        headers["retry-after"] = str(max(0, math.ceil(refusal.retry_after_s)))
    if refusal.should_retry is not None:
        headers["x-should-retry"] = "true" if refusal.should_retry else "false"
    return headers


def openai_error(refusal: Refusal) -> web.Response:
    """``refusal`` in OpenAI's envelope."""
    body = {"error": {"message": refusal.message, "type": refusal.kind, "code": refusal.code,
                      "param": refusal.param}}
    return web.Response(status=refusal.status, body=json.dumps(body).encode(), content_type="application/json",
                        headers=retry_headers(refusal))


_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                    503: "overloaded_error", 504: "timeout_error"}


def anthropic_error(refusal: Refusal) -> web.Response:
    """``refusal`` in Anthropic's envelope."""
    body = {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(refusal.status, "api_error"),
                                       "message": refusal.message}}
    return web.Response(status=refusal.status, body=json.dumps(body).encode(), content_type="application/json",
                        headers=retry_headers(refusal))
