"""What the gateway answers when a call fails: one table from the provmw error tree to an HTTP
status, written in each wire's envelope.

::

    GatewayRefusal                 the gateway's own: 401 key, 404 model, 413 body, 429 concurrency, 400 body
    BudgetExceededError            429, retry-after to its reset; x-should-retry: false. The caller's own
                                   bucket (key, team, organisation, user) named with its limit and spend;
                                   a shared one (global, configuration, another tenant's) only "exhausted"
    RateLimitError (local or not)  429 with retry-after (an upstream quota exhausted: 503)
    CircuitOpenError, PoolUnavailableError, ProviderUnavailableError,
    BudgetUnavailableError, UsageLedgerUnavailableError, the key store   503 with retry-after
    FallbackExhaustedError         the last attempt's answer; 503 when that was one of unavailability
    ConfigurationError, InvalidRequestError, InvalidDataError,
    GuardRefusedError (the rule named)                             400
    GuardRefusedError policy:unknown, or no guard for a key's policy   503, x-should-retry: false
    GuardRefusedError check:unavailable, check:timeout, check:invalid_answer   503 with retry-after
    AuthenticationError (upstream) 502: the operator's credentials, never the client's 401
    MalformedResponseError, StreamInterruptedError, StructuredOutputError                 502
    ProviderTimeoutError, DeadlineExceededError, TimeoutError     504
    anything else                  500 "internal error", logged here with its traceback, nothing shown

An upstream or shared-state failure says one fixed sentence per class: its own text holds the
operator's URLs, upstream model names and provider internals. A validation error says which of
the request's own field names it concerns, and nothing else of its text. aiohttp's own refusals
(404 route, 405 method, 413) are written in the envelope too (``envelope_errors``).

The SDKs act on the status and on ``retry-after-ms`` / ``retry-after`` (OpenAI's and Anthropic's
both read the first, precise, one; the second is whole seconds for everyone else).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import re

import attrs
from aiohttp import web
from aiohttp.typedefs import Handler

from provmw import errors as e

__all__ = ["SHARED_STATE_RETRY_S", "GatewayRefusal", "Own", "Refusal", "anthropic_error", "envelope_errors",
           "guard_policy_unavailable", "invalid_field", "openai_error", "refusal_of", "retry_headers"]

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


# Upstream and shared-state failures each say one fixed thing: their own text holds the operator's
# URLs, upstream model names and provider internals (ADR 0055). Most specific class first.
_FIXED: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], int, str, str, str], ...] = (
    (e.PoolUnavailableError, 503, "service_unavailable", "service_unavailable",
     "no member of this model's pool can answer now"),
    (e.CircuitOpenError, 503, "service_unavailable", "service_unavailable", "this model is unavailable for now"),
    (e.ProviderUnavailableError, 503, "service_unavailable", "service_unavailable",
     "the upstream provider is unavailable"),
    ((e.BudgetUnavailableError, e.UsageLedgerUnavailableError), 503, "service_unavailable", "service_unavailable",
     "the gateway's shared state is unavailable"),
    (e.ProviderTimeoutError, 504, "timeout", "timeout", "the upstream provider did not answer in time"),
    (e.DeadlineExceededError, 504, "timeout", "timeout", "the request's time limit passed"),
    (TimeoutError, 504, "timeout", "timeout", "the request timed out"),
    (e.ContextLengthExceededError, 400, "invalid_request_error", "context_length_exceeded",
     "the request is longer than the model's context window"),
    (e.ContentPolicyError, 400, "invalid_request_error", "content_policy_violation",
     "the upstream provider's content policy refused the request"),
    (e.InvalidRequestError, 400, "invalid_request_error", "invalid_request",
     "the upstream provider refused the request as invalid"),
    (e.StructuredOutputError, 502, "upstream_error", "bad_gateway", "the model's answer did not match the schema"),
    (e.StreamInterruptedError, 502, "upstream_error", "bad_gateway", "the upstream provider's stream was cut"),
    (e.MalformedResponseError, 502, "upstream_error", "bad_gateway", "the upstream provider's answer was unreadable"),
    (e.UnsupportedOperationError, 400, "invalid_request_error", "invalid_request",
     "this model does not support this operation"),
)
# The shared state says nothing of when it is back: the client's retry comes a little later.
SHARED_STATE_RETRY_S = 1.0
_SHARED_STATE = (e.BudgetUnavailableError, e.UsageLedgerUnavailableError)
_INVALID = (e.ConfigurationError, e.InvalidDataError)
# The guard's external check failing (the operator's service, not the request): refused, but an outage.
_GUARD_CHECK_DOWN = frozenset({"check:unavailable", "check:timeout", "check:invalid_answer"})
_FIELDS_SHOWN = 64  # of the body's own names, those looked for in a validation error's text


@attrs.frozen
class Own:
    """What a refusal may show the client as its own: the budget buckets of its key, team,
    organisation and user, the field names its request body used, and its key's guard policy."""

    buckets: frozenset[str] = frozenset()
    fields: tuple[str, ...] = ()
    guard: str | None = None


_NOBODY = Own()


def refusal_of(exc: BaseException, own: Own = _NOBODY) -> Refusal:
    """The client's view of ``exc`` (the table in this module's docstring); ``own``: what is the client's."""
    if isinstance(exc, GatewayRefusal):
        return exc.refusal
    if isinstance(exc, e.BudgetExceededError):
        return _budget(exc, own)
    if isinstance(exc, e.LocalRateLimitError):
        return Refusal(429, "rate_limit_exceeded", "the gateway's rate limit for this model is reached; retry later",
                       "rate_limit_exceeded", retry_after_s=exc.retry_after_s)
    if isinstance(exc, e.RateLimitError) and not exc.quota_exhausted:
        return Refusal(429, "rate_limit_exceeded", "the upstream provider is rate limiting calls; retry later",
                       "rate_limit_exceeded", retry_after_s=exc.retry_after_s)
    if isinstance(exc, e.RateLimitError | e.AuthenticationError):
        # The operator's account (key or quota), not the client's: not their 401, not worth their retry.
        log.error("upstream refused the gateway's account: %s: %s", type(exc).__name__, exc)
        return Refusal(502 if isinstance(exc, e.AuthenticationError) else 503, "upstream_error",
                       "the upstream provider refused the gateway's account", "upstream_account", should_retry=False)
    if isinstance(exc, e.FallbackExhaustedError):
        return _exhausted(exc, own)
    return _by_class(exc, own)


def _budget(exc: e.BudgetExceededError, own: Own) -> Refusal:
    """The caller's own bucket in full; a bucket others share (global, configuration, another tenant's)
    only as exhausted, with its reset: its limit and spend are the operator's and other tenants'."""
    if exc.bucket in own.buckets:
        message = str(exc)
    else:
        message = "budget exhausted" + (f"; it resets at {exc.resets_at}" if exc.resets_at else "")
    return Refusal(429, "budget_exceeded", message, "budget_exceeded", retry_after_s=_seconds_to(exc.resets_at),
                   should_retry=False)


def _by_class(exc: BaseException, own: Own) -> Refusal:
    for classes, status, kind, code, message in _FIXED:
        if isinstance(exc, classes):
            after = getattr(exc, "retry_after_s", None)
            if after is None and isinstance(exc, _SHARED_STATE):
                after = SHARED_STATE_RETRY_S
            param = "messages" if code == "context_length_exceeded" else None
            return Refusal(status, kind, message, code, param, retry_after_s=after if status == 503 else None)
    if isinstance(exc, e.GuardRefusedError) and exc.rule == "policy:unknown" and own.guard is not None:
        return guard_policy_unavailable(own.guard)  # the operator's settings lack it: not the client's request
    if isinstance(exc, e.GuardRefusedError) and exc.rule in _GUARD_CHECK_DOWN:
        return Refusal(503, "service_unavailable", "the guard's content check is unavailable",
                       "guard_check_unavailable", retry_after_s=SHARED_STATE_RETRY_S)
    if isinstance(exc, e.GuardRefusedError):
        return Refusal(400, "invalid_request_error", f"refused by guard rule {exc.rule!r} ({exc.stage})",
                       "guard_refused")
    if isinstance(exc, _INVALID) and not isinstance(exc, e.DestinationRefusedError):
        fields = _fields_in(str(exc), own.fields)
        named = f" (see {', '.join(fields)})" if fields else ""
        return Refusal(400, "invalid_request_error", f"the request is invalid{named}", "invalid_request",
                       fields[0] if fields else None)
    log.error("internal error in the gateway", exc_info=exc)
    return Refusal(500, "server_error", "internal error", "internal_error")


def _fields_in(text: str, fields: tuple[str, ...]) -> list[str]:
    """The body's own field names ``text`` mentions, in the order it does (only the client's words)."""
    found = {}
    for name in fields[:_FIELDS_SHOWN]:
        hit = re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text)
        if hit is not None:
            found[name] = hit.start()
    return sorted(found, key=found.__getitem__)


def _exhausted(exc: e.FallbackExhaustedError, own: Own) -> Refusal:
    sent = [a for a in exc.attempts if a.sent] or list(exc.attempts)
    last = refusal_of(sent[-1].error, own) if sent else Refusal(503, "service_unavailable",
                                                                "no configuration could answer")
    if last.status < 429 or last.status == 502:
        return last
    afters = [after for a in exc.attempts if (after := getattr(a.error, "retry_after_s", None)) is not None]
    return Refusal(503, "service_unavailable", f"no configuration could answer: {last.message}",
                   "service_unavailable", retry_after_s=min(afters) if afters else None)


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
                    404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
                    429: "rate_limit_error", 503: "overloaded_error", 504: "timeout_error"}


def anthropic_error(refusal: Refusal) -> web.Response:
    """``refusal`` in Anthropic's envelope."""
    body = {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(refusal.status, "api_error"),
                                       "message": refusal.message}}
    return web.Response(status=refusal.status, body=json.dumps(body).encode(), content_type="application/json",
                        headers=retry_headers(refusal))


def guard_policy_unavailable(policy: str) -> Refusal:
    """A 503 for a key whose guard policy cannot be applied (no guard installed, or no such policy in
    its settings): the key is refused, never served unguarded, and a retry would meet the same."""
    return Refusal(503, "service_unavailable", f"guard policy {policy!r} is not available",
                   "guard_policy_unavailable", should_retry=False)


def invalid_field(field: str, problem: str) -> GatewayRefusal:
    """A 400 for the body's ``field`` (the client's own path, as ``messages[0].content``)."""
    return GatewayRefusal(Refusal(400, "invalid_request_error", f"{field} {problem}", "invalid_request", field))


_HTTP_KINDS = {404: ("not_found", "not_found_error"), 405: ("method_not_allowed", "invalid_request_error"),
               413: ("request_too_large", "invalid_request_error")}


@web.middleware
async def envelope_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own refusals (no such route, method not allowed...) in the wire's envelope rather than
    its plain text: Anthropic's under /v1/messages, OpenAI's elsewhere."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code, kind = _HTTP_KINDS.get(exc.status, ("invalid_request", "invalid_request_error"))
        refusal = Refusal(exc.status, kind, exc.reason.lower() if exc.reason else "refused", code)
        wire = anthropic_error if request.path.startswith("/v1/messages") else openai_error
        response = wire(refusal)
        if "allow" in exc.headers:  # a 405 says which methods the path takes
            response.headers["allow"] = exc.headers["allow"]
        return response
