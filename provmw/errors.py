"""The provmw error tree, and the one classification of what may be retried or fall back.

::

    ProvmwError
    ├── ConfigurationError                 bad settings, file, or call arguments
    │   ├── DestinationRefusedError        an ad-hoc base_url reaches an address the policy refuses
    │   ├── UnknownArgumentError           a call method got a keyword it does not take (a TypeError too)
    │   └── UnsupportedOperationError      the provider lacks a capability the call needs; nothing was sent
    ├── InvalidDataError                   a dict that does not decode to the type asked for
    ├── PluginError
    │   ├── PluginLoadError                an entry point failed to import or load
    │   └── DuplicateMiddlewareError       two middleware share a name
    ├── ProviderError                      provider, model, status, retry_after_s, never_sent
    │   ├── RateLimitError                 429 (quota_exhausted for insufficient_quota)
    │   │   └── LocalRateLimitError        our own rate_limit refused; nothing was sent
    │   ├── ProviderTimeoutError           408, 504, read timeout
    │   │   └── AttemptTimeoutError        the timeout middleware's per-attempt limit fired
    │   │       └── FirstChunkTimeoutError a stream sent no content within its first-chunk limit
    │   ├── ProviderUnavailableError       409, 5xx, 529 overloaded
    │   │   └── ProviderConnectionError    refused, reset, DNS failure
    │   ├── MalformedResponseError         a body that is not the documented JSON
    │   │   └── ResponseTooLargeError      a body, SSE line or event over its limit; limit_bytes
    │   │       └── StreamTooLargeError    a whole stream over [http] max_stream_bytes; limit_bytes
    │   ├── StreamInterruptedError         a stream failed after its first chunk; the cause is chained
    │   ├── StructuredOutputError          an answer that breaks the call's response_schema, repaired once
    │   ├── AuthenticationError            401, 403
    │   └── InvalidRequestError            400, 404, 413, 422, other 4xx
    │       ├── ContextLengthExceededError the prompt does not fit the model
    │       └── ContentPolicyError         refused by the provider's content filter
    ├── CircuitOpenError                   a breaker is open; retry_after_s
    │   └── PoolUnavailableError           no deployment of a pool can take the call now; retry_after_s
    ├── DeadlineExceededError              the logical call's total time limit fired
    ├── GuardRefusedError                  a guard refused the request or the answer; rule, stage
    ├── FallbackExhaustedError             every attempt and its error, skipped configurations too
    ├── BudgetExceededError                bucket, dimension, limit, spent, reserved, period, needed, set_by
    ├── BudgetUnavailableError             fail-closed: the budget store cannot reserve
    └── UsageLedgerUnavailableError        fail-closed: the ledger cannot take more records

``disposition(exc)`` is the single answer to "retry it?" and "try the next
configuration?". A server's ``x-should-retry`` hint overrides the retry answer. A
context-length error may fall back only to a larger context window; the fallback
middleware checks that itself.
No error message ever contains an API key: configurations mask theirs by type,
adapters never put request headers into errors, and the manager scrubs every credential a
request carried out of any error that leaves the terminal (a provider may echo them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import attrs

__all__ = [
    "AuthenticationError",
    "BudgetExceededError",
    "BudgetUnavailableError",
    "AttemptTimeoutError",
    "CircuitOpenError",
    "ConfigurationError",
    "ContentPolicyError",
    "ContextLengthExceededError",
    "DeadlineExceededError",
    "DestinationRefusedError",
    "FirstChunkTimeoutError",
    "GuardRefusedError",
    "Disposition",
    "DuplicateMiddlewareError",
    "FallbackAttempt",
    "FallbackExhaustedError",
    "InvalidDataError",
    "InvalidRequestError",
    "LocalRateLimitError",
    "MalformedResponseError",
    "PluginError",
    "PoolUnavailableError",
    "PluginLoadError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "ProvmwError",
    "RateLimitError",
    "ResponseTooLargeError",
    "StreamInterruptedError",
    "StreamTooLargeError",
    "StructuredOutputError",
    "UnknownArgumentError",
    "UnsupportedOperationError",
    "UsageLedgerUnavailableError",
    "disposition",
]


class ProvmwError(Exception):
    """Base class of every error provmw raises."""

    def __reduce__(self) -> tuple[object, ...]:
        # An error crosses processes (pickle) as its class, its args and its attributes,
        # whatever its __init__ takes: no class needs a recipe of its own.
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[ProvmwError], args: tuple[object, ...], state: dict[str, object]) -> ProvmwError:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class ConfigurationError(ProvmwError):
    """A setting, configuration file entry or call argument is invalid."""


class UnknownArgumentError(ConfigurationError, TypeError):
    """A call method got a keyword argument that is neither a call argument nor a known option
    (a ``TypeError`` too, as Python's own unknown-keyword error is)."""


class DestinationRefusedError(ConfigurationError):
    """An ad-hoc ``base_url`` names, or resolves to, an address of a class (``kind``: loopback,
    private, link_local, metadata, reserved) the destination policy refuses; nothing was sent."""

    never_sent = True  # the ledger records a refusal met inside the stack as not billed

    def __init__(self, host: str, address: str, kind: str, hint: str) -> None:
        super().__init__(f"ad-hoc base_url host {host!r} reaches {address} ({kind.replace('_', '-')} address): {hint}")
        self.host = host
        self.address = address
        self.kind = kind
        self.hint = hint


class InvalidDataError(ProvmwError, ValueError):
    """A serialized value (``from_dict``, a cache entry) does not describe its type."""


class UnsupportedOperationError(ConfigurationError):
    """The provider lacks what the call needs: ``operation`` names an operation (``embedding``)
    or a capability (``schema``, ``response_format``, ``tools``...); nothing was sent.

    ``configuration`` names the configuration that could not serve it, when one was chosen.
    """

    def __init__(self, provider: str, operation: str, *, configuration: str | None = None) -> None:
        which = f" (configuration {configuration!r})" if configuration else ""
        super().__init__(f"provider {provider!r}{which} does not support the {operation!r} operation")
        self.provider = provider
        self.operation = operation
        self.configuration = configuration


class PluginError(ProvmwError):
    """A plugin could not be loaded or conflicts with another."""


class PluginLoadError(PluginError):
    """An entry point of the ``provmw`` group failed to import or to register."""


class DuplicateMiddlewareError(PluginError):
    """Two middleware in one pipeline share a name."""


class ProviderError(ProvmwError):
    """A provider call failed; carries what is known about where and why."""

    retryable: ClassVar[bool] = False
    fallback_eligible: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        model: str | None = None,
        status: int | None = None,
        retry_after_s: float | None = None,
        should_retry: bool | None = None,
        code: str | None = None,
        never_sent: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.model = model
        self.status = status
        self.retry_after_s = retry_after_s
        self.should_retry = should_retry
        self.code = code
        # True only when the request provably never left (no connection was made), so the
        # ledger may record it as not billed; False means "may have reached the provider".
        self.never_sent = never_sent

    def __str__(self) -> str:
        where = "/".join(part for part in (self.provider, self.model) if part)
        status = f" (HTTP {self.status})" if self.status is not None else ""
        return f"{where}{status}: {self.message}" if where else f"{self.message}{status}"


class RateLimitError(ProviderError):
    """The provider throttled the call (429); ``quota_exhausted`` means waiting won't help."""

    retryable = True
    fallback_eligible = True

    @property
    def quota_exhausted(self) -> bool:
        return self.code == "insufficient_quota"


class LocalRateLimitError(RateLimitError):
    """The ``rate_limit`` middleware refused the call after waiting; nothing reached the provider.

    ``limit`` names the limit that refused (``requests_per_minute``, ``tokens_per_minute``
    or ``max_concurrency``). Not retried (the middleware already waited); may fall back.
    """

    retryable = False

    def __init__(self, message: str, *, limit: str, config_id: str, **fields: object) -> None:
        super().__init__(message, **fields)  # type: ignore[arg-type]
        self.limit = limit
        self.config_id = config_id


class ProviderTimeoutError(ProviderError):
    """The provider did not answer in time; it may still have processed (and billed) the call."""

    retryable = True
    fallback_eligible = True


class AttemptTimeoutError(ProviderTimeoutError):
    """One attempt ran past the ``timeout`` middleware's limit (``limit_s``) and was cancelled."""

    def __init__(self, message: str, *, limit_s: float, **fields: object) -> None:
        super().__init__(message, **fields)  # type: ignore[arg-type]
        self.limit_s = limit_s


class FirstChunkTimeoutError(AttemptTimeoutError):
    """A stream's attempt sent no content within its first-chunk limit (``limit_s``)."""


class StreamInterruptedError(ProviderError):
    """A stream failed after its first chunk reached the caller (``chunks`` of them did).

    Raised by the stream's iterator, outside the pipeline: nothing is retried or failed over
    once text has been handed out, so another model's text is never spliced in. The error
    that stopped it (a dropped connection, an in-band error event, the idle limit) is its
    ``__cause__``.
    """

    def __init__(self, message: str, *, chunks: int, **fields: object) -> None:
        super().__init__(message, **fields)  # type: ignore[arg-type]
        self.chunks = chunks


class ProviderUnavailableError(ProviderError):
    """The provider is overloaded, failing (5xx) or in conflict (409)."""

    retryable = True
    fallback_eligible = True


class ProviderConnectionError(ProviderUnavailableError):
    """No usable connection: refused, reset, or the host name did not resolve."""


class MalformedResponseError(ProviderError):
    """The provider answered with a body that is not the documented JSON."""

    retryable = True
    fallback_eligible = True


class ResponseTooLargeError(MalformedResponseError):
    """An answer (a body, an SSE line or event) ran past its ``limit_bytes``; reading stopped there.

    Not retried: the same request is likely to bring the same flood (and the provider may bill
    it again); the next configuration may answer sensibly.
    """

    retryable = False

    def __init__(self, message: str, *, limit_bytes: int, **fields: object) -> None:
        super().__init__(message, **fields)  # type: ignore[arg-type]
        self.limit_bytes = limit_bytes


class StreamTooLargeError(ResponseTooLargeError):
    """A stream's bytes, all its events together, ran past ``limit_bytes`` (``[http]
    max_stream_bytes``); reading stopped there. After the first chunk it is the ``__cause__``
    of the ``StreamInterruptedError`` the caller gets."""


class StructuredOutputError(ProviderError):
    """The answer does not follow the call's ``response_schema``, even after one repair turn.

    ``problem`` says where it broke the schema (or that it is not JSON). Never retried as is
    (the ``structured_output`` layer already asked once more); another configuration may do better.
    """

    fallback_eligible = True

    def __init__(self, message: str, *, problem: str, **fields: object) -> None:
        super().__init__(message, **fields)  # type: ignore[arg-type]
        self.problem = problem


class AuthenticationError(ProviderError):
    """The provider rejected the credentials (401) or the permission (403)."""


class InvalidRequestError(ProviderError):
    """The provider rejected the request itself; sending it again will not help."""


class ContextLengthExceededError(InvalidRequestError):
    """The prompt plus output does not fit the model's context window."""


class ContentPolicyError(InvalidRequestError):
    """The provider's content filter refused the request or the answer."""


class CircuitOpenError(ProvmwError):
    """A circuit breaker is open: skip this configuration for ``retry_after_s``."""

    def __init__(self, breaker: str, retry_after_s: float) -> None:
        super().__init__(f"circuit {breaker!r} is open; retry after {retry_after_s:.3g}s")
        self.breaker = breaker
        self.retry_after_s = retry_after_s


class PoolUnavailableError(CircuitOpenError):
    """No deployment of pool ``pool`` can take the call now (each cooling down after a 429 or an
    open breaker, at its requests or tokens a minute, or already failed in this call): like an
    open breaker, the fallback chain moves on, and ``retry_after_s`` says when one is free."""

    never_sent = True

    def __init__(self, pool: str, retry_after_s: float, reasons: str) -> None:
        ProvmwError.__init__(self, f"pool {pool!r} has no deployment free for this call ({reasons}); "
                                   f"retry after {retry_after_s:.3g}s")
        self.breaker, self.pool, self.retry_after_s = pool, pool, retry_after_s


class DeadlineExceededError(ProvmwError, TimeoutError):
    """The logical call (every attempt and fallback) ran past its total time limit ``limit_s``."""

    def __init__(self, limit_s: float, elapsed_s: float) -> None:
        super().__init__(f"deadline of {limit_s:g}s for the whole call exceeded after {elapsed_s:.3g}s")
        self.limit_s = limit_s
        self.elapsed_s = elapsed_s


@attrs.frozen
class FallbackAttempt:
    """One configuration of the fallback walk and the error it ended with; ``sent`` is False
    for one skipped before sending because it cannot honour the call (``UnsupportedOperationError``)."""

    config_id: str
    error: BaseException
    sent: bool = True

    def __str__(self) -> str:
        how = "" if self.sent else "skipped, "
        return f"{self.config_id}: {how}{type(self.error).__name__}: {self.error}"


class FallbackExhaustedError(ProvmwError):
    """No configuration of a fallback chain answered: each failed or was skipped, and why."""

    def __init__(self, attempts: Sequence[FallbackAttempt]) -> None:
        self.attempts = tuple(attempts)
        lines = "; ".join(str(a) for a in attempts)
        super().__init__(f"all {len(self.attempts)} configurations failed or were skipped ({lines})")


def _plain(amount: float) -> str:
    """An amount for people to read: never in exponent form (``0.000003``, not ``3e-06``)."""
    return f"{amount:.9f}".rstrip("0").rstrip(".") or "0"


class BudgetExceededError(ProvmwError):
    """A budget bucket refused the call before it reached a provider.

    ``dimension`` is what ran out: ``cost_usd``, ``tokens`` or ``requests``; ``resets_at``
    is an ISO 8601 time in the budget's time zone, or None for a total. ``needed`` is what
    this call asked to reserve in that dimension (a strict budget's worst case), ``set_by``
    the configuration of its fallback chain that made it that large, ``reason`` why, with the
    setting that lowers it; ``further_attempt`` is True when a retry or fallback of a call
    already under way was refused (each attempt reserves again).
    """

    never_sent = True  # refused before the request left: the ledger records it as not billed

    def __init__(
        self,
        bucket: str,
        *,
        limit: float,
        spent: float,
        reserved: float,
        period: str,
        resets_at: str | None = None,
        dimension: str = "cost_usd",
        needed: float | None = None,
        set_by: str | None = None,
        reason: str | None = None,
        further_attempt: bool = False,
    ) -> None:
        resets = f", resets at {resets_at}" if resets_at else ""
        super().__init__(
            f"budget {bucket!r} ({period}) exceeded on {dimension}: limit {_plain(limit)}, spent {_plain(spent)}, "
            f"reserved {_plain(reserved)}{resets}{_needed(needed, set_by, reason, further_attempt)}"
        )
        self.bucket = bucket
        self.limit = limit
        self.spent = spent
        self.reserved = reserved
        self.period = period
        self.resets_at = resets_at
        self.dimension = dimension
        self.needed = needed
        self.set_by = set_by
        self.reason = reason
        self.further_attempt = further_attempt


def _needed(needed: float | None, set_by: str | None, reason: str | None, further: bool) -> str:
    if needed is None:
        return ""
    who = "a further attempt of this call (a retry or fallback reserves again)" if further else "this call"
    by = f", set by {set_by!r}" if set_by else ""
    return f"; {who} needed {_plain(needed)}{by}" + (f": {reason}" if reason else "")


class GuardRefusedError(ProvmwError):
    """A guard refused the call's request (``stage="input"``, nothing was sent) or its answer
    (``stage="output"``). ``rule`` names the rule that refused, never the text it matched; a
    guard that cannot run (its check down, late or answering nonsense) refuses too, unless it
    only monitors. Neither retried nor failed over: another attempt would say the same."""

    def __init__(self, message: str, *, rule: str, stage: str = "input") -> None:
        super().__init__(message)
        self.rule, self.stage = rule, stage

    @property
    def never_sent(self) -> bool:
        return self.stage == "input"


class BudgetUnavailableError(ProvmwError):
    """The budget store could not be reached: a fail-closed budget refuses the call before it
    reaches a provider, rather than spend without counting."""

    never_sent = True


class UsageLedgerUnavailableError(ProvmwError):
    """The usage store is failing and its journal is full: a fail-closed ledger refuses the call
    before it reaches a provider, rather than lose the record."""

    never_sent = True


@attrs.frozen
class Disposition:
    """What the reliability middleware may do after an error."""

    retryable: bool
    may_fall_back: bool
    endpoint_failed: bool = False  # counts against the endpoint's breaker


def disposition(exc: BaseException) -> Disposition:
    """Classify ``exc``: may the same configuration be retried, may the next one be tried?"""
    if isinstance(exc, ProviderError):
        retryable = type(exc).retryable
        if isinstance(exc, RateLimitError) and exc.quota_exhausted:
            retryable = False
        if exc.should_retry is not None:
            retryable = exc.should_retry
        fallback = type(exc).fallback_eligible
        about_the_account = isinstance(exc, AuthenticationError) or \
            (isinstance(exc, RateLimitError) and exc.quota_exhausted)
        # An answer that breaks the schema came from a working endpoint: no breaker counts it.
        healthy = about_the_account or isinstance(exc, StructuredOutputError)
        return Disposition(retryable=retryable, may_fall_back=fallback, endpoint_failed=fallback and not healthy)
    if isinstance(exc, CircuitOpenError):
        return Disposition(retryable=False, may_fall_back=True)  # not a new failure of the endpoint
    if isinstance(exc, DeadlineExceededError):  # the whole call is out of time
        return Disposition(retryable=False, may_fall_back=False)
    if isinstance(exc, TimeoutError):  # asyncio.TimeoutError is TimeoutError since 3.11
        return Disposition(retryable=True, may_fall_back=True, endpoint_failed=True)
    return Disposition(retryable=False, may_fall_back=False)

