"""provmw's built-in middleware, one module each, and the builder that reads their settings.

========== ================= ==================================================
priority   name              job
========== ================= ==================================================
850        ``deadline``      total time of the logical call, cache waits included
810        ``usage_hits``    ledger records for the calls the cache answered
800        ``cache``         tenant-scoped answers, single-flight misses
700        ``budget``        reserve the worst case, settle the real cost, refuse the rest
600        ``fallback``      walk the configuration's fallback chain
550        ``rate_limit``    requests/tokens per minute and concurrency
500        ``retry``         retries with backoff, hints and a retry budget
400        ``circuit_breaker`` stop calling a failing endpoint, then probe it
300        ``usage``         one priced ledger record per attempt that reached a provider
200        ``timeout``       per-attempt time limit
========== ================= ==================================================

ADR 0007 explains the order, ADR 0010 the cache, ADR 0011 budgets and usage, ADR 0012 shared
state. Each reads its own ``[middleware.<name>]`` section (``usage_hits`` writes to ``usage``'s
ledger and takes only ``enabled``); unknown keys are errors that name a near match. The cache,
budget, breakers and rate limits keep their state in the ``[state]`` backend when it shares
them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

import attrs

from provmw.config import did_you_mean
from provmw.errors import ConfigurationError
from provmw.middleware.budget import BudgetMiddleware, BudgetOptions
from provmw.middleware.cache import CacheMiddleware, CacheOptions
from provmw.middleware.circuit_breaker import CircuitBreakerMiddleware
from provmw.middleware.deadline import DeadlineMiddleware, DeadlineOptions
from provmw.middleware.fallback import FallbackMiddleware
from provmw.middleware.rate_limit import RateLimitMiddleware, RateLimitOptions
from provmw.middleware.retry import RetryMiddleware, RetryOptions
from provmw.middleware.timeout import TimeoutMiddleware
from provmw.middleware.usage import UsageHitsMiddleware, UsageMiddleware, UsageOptions
from provmw.settings import options_from
from provmw.stores.breakers import BreakerPolicy

if TYPE_CHECKING:
    from provmw.pipeline import Middleware
    from provmw.settings import Settings
    from provmw.stores.shared import StateBackend

__all__ = [
    "BudgetMiddleware",
    "CacheMiddleware",
    "CircuitBreakerMiddleware",
    "DeadlineMiddleware",
    "FallbackMiddleware",
    "RateLimitMiddleware",
    "RetryMiddleware",
    "TimeoutMiddleware",
    "UsageHitsMiddleware",
    "UsageMiddleware",
    "builtin_middleware",
    "state_options",
]

T = TypeVar("T")


@attrs.frozen
class _NoOptions:
    """A section that takes no keys but ``enabled``."""


def builtin_middleware(settings: Settings, state: StateBackend | None = None) -> list[Middleware]:
    """The built-in middleware, configured from ``settings`` (disabled ones are dropped later)."""

    def shared(concern: str, store: Callable[[StateBackend], T]) -> T | None:
        if state is None or settings.state is None or concern not in settings.state.shared:
            return None
        return store(state)

    def options(cls: type[T], name: str) -> T:
        return options_from(cls, settings.section(name), f"{settings.source}: [middleware.{name}]")

    rate_limits = options(RateLimitOptions, "rate_limit")
    _check_names(settings, "[middleware.rate_limit.limits]", rate_limits.limits)
    budget = state_options(settings, BudgetOptions, "budget")
    _check_names(settings, "[middleware.budget] limits: match",
                 [b.match for b in budget.limits if b.scope == "configuration"])
    options(_NoOptions, "fallback")
    options(_NoOptions, "timeout")
    options(_NoOptions, "usage_hits")
    journal = state_options(settings, UsageOptions, "usage").journal()
    return [
        CacheMiddleware(options(CacheOptions, "cache"), store=shared("cache", lambda s: s.cache_store())),
        DeadlineMiddleware(options(DeadlineOptions, "deadline")),
        BudgetMiddleware(budget, store=shared("budget", lambda s: s.budget_store())),
        FallbackMiddleware(settings.configurations),
        RateLimitMiddleware(rate_limits, limiter=shared("rate_limit", lambda s: s.rate_limiter())),
        RetryMiddleware(options(RetryOptions, "retry")),
        CircuitBreakerMiddleware(options(BreakerPolicy, "circuit_breaker"),
                                 store=shared("circuit_breaker", lambda s: s.breaker_store())),
        TimeoutMiddleware(),
        UsageMiddleware(journal),
        UsageHitsMiddleware(journal),
    ]


S = TypeVar("S", BudgetOptions, UsageOptions)


def state_options(settings: Settings, cls: type[S], name: str) -> S:
    """The options of a middleware that keeps state in a file; its ``path`` is relative to the
    settings file."""
    options = options_from(cls, settings.section(name), f"{settings.source}: [middleware.{name}]")
    return attrs.evolve(options, path=settings.relative_to_file(options.path))


def _check_names(settings: Settings, where: str, names: Iterable[str]) -> None:
    known = [*settings.configurations, "*"]
    for identifier in names:
        if identifier not in known:
            raise ConfigurationError(f"{settings.source}: {where} {identifier!r} names no configuration"
                                     f"{did_you_mean(identifier, known)}")
