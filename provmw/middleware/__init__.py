"""provmw's built-in middleware, one module each, declared in one table.

========== ================= ==================================================
priority   name              job
========== ================= ==================================================
850        ``deadline``      total time of the logical call, cache waits included
810        ``usage_hits``    ledger records for the calls the cache answered
805        ``idempotency``   a repeated ``idempotency_key`` gets the first answer, charged once
800        ``cache``         tenant-scoped answers, single-flight misses
700        ``budget``        reserve the worst case, settle the real cost, refuse the rest
600        ``fallback``      walk the configuration's fallback chain
550        ``rate_limit``    requests/tokens per minute and concurrency
520        ``structured_output`` check an answer against ``response_schema``, repair it once
500        ``retry``         retries with backoff, hints and a retry budget
450        ``pool``          choose a deployment of a pool for each attempt (only with pools)
400        ``circuit_breaker`` stop calling a failing endpoint, then probe it
300        ``usage``         one priced ledger record per attempt that reached a provider
200        ``timeout``       a per-call attempt time limit (``controls={"attempt_timeout_s": x}``)
========== ================= ==================================================

ADR 0007 explains the order, ADR 0010 the cache, ADR 0011 budgets and usage, ADR 0013 where
state lives, ADR 0024 structured output. :data:`BUILTINS` declares each one: its name (also its ``[middleware.<name>]``
section), its class, its options class, and what it is handed from the manager's
:class:`~provmw.state.State`. A built-in whose section says ``enabled = false`` is never
constructed; a section is parsed by :func:`section_options`, whose errors name the file,
the section and the key with a "did you mean".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from provmw.errors import ConfigurationError
from provmw.middleware.budget import BudgetMiddleware, BudgetOptions
from provmw.middleware.cache import CacheMiddleware, CacheOptions
from provmw.middleware.circuit_breaker import CircuitBreakerMiddleware
from provmw.middleware.deadline import DeadlineMiddleware, DeadlineOptions
from provmw.middleware.fallback import FallbackMiddleware
from provmw.middleware.idempotency import IdempotencyMiddleware, IdempotencyOptions
from provmw.middleware.pool import PoolMiddleware
from provmw.middleware.rate_limit import RateLimitMiddleware, RateLimitOptions
from provmw.middleware.retry import RetryMiddleware, RetryOptions
from provmw.middleware.structured_output import StructuredOutputMiddleware
from provmw.middleware.timeout import TimeoutMiddleware
from provmw.middleware.usage import UsageHitsMiddleware, UsageMiddleware, UsageOptions
from provmw.options import did_you_mean, options_from
from provmw.stores.breakers import BreakerPolicy
from provmw.stores.usage import is_store_url

if TYPE_CHECKING:
    from provmw.pipeline import Middleware
    from provmw.settings import Settings
    from provmw.state import State

__all__ = [
    "BUDGET",
    "BUILTINS",
    "CACHE",
    "IDEMPOTENCY",
    "POOL",
    "USAGE",
    "BudgetMiddleware",
    "Builtin",
    "CacheMiddleware",
    "CircuitBreakerMiddleware",
    "DeadlineMiddleware",
    "FallbackMiddleware",
    "IdempotencyMiddleware",
    "RateLimitMiddleware",
    "RetryMiddleware",
    "StructuredOutputMiddleware",
    "TimeoutMiddleware",
    "UsageHitsMiddleware",
    "NoOptions",
    "PoolMiddleware",
    "UsageMiddleware",
    "builtin_middleware",
    "enabled",
    "section_options",
    "store_options",
]

OptionsT = TypeVar("OptionsT")


@attrs.frozen
class NoOptions:
    """The options of a built-in whose section takes no key but ``enabled``."""


@attrs.frozen
class Builtin(Generic[OptionsT]):
    """One built-in: ``name`` (and section), class, options class, and what it is handed.

    ``inject`` returns the keyword arguments the class takes besides its options (its store,
    from the manager's state). The options are passed first unless ``takes_options`` is
    false: ``usage``'s options say where its ledger lives, which the state reads.
    """

    name: str
    cls: Callable[..., Middleware]
    options: type[OptionsT]
    inject: Callable[[Settings, State], Mapping[str, Any]] = lambda settings, state: {}
    takes_options: bool = True
    wanted: Callable[[Settings], bool] = lambda settings: True  # built only where the settings need it


DEADLINE = Builtin("deadline", DeadlineMiddleware, DeadlineOptions)
USAGE_HITS = Builtin("usage_hits", UsageHitsMiddleware, NoOptions, lambda _, state: {"journal": state.usage_journal()},
                     takes_options=False)
IDEMPOTENCY = Builtin("idempotency", IdempotencyMiddleware, IdempotencyOptions,
                      lambda _, state: {"store": state.idempotency_store()})
CACHE = Builtin("cache", CacheMiddleware, CacheOptions, lambda _, state: {"store": state.cache_store()})
BUDGET = Builtin("budget", BudgetMiddleware, BudgetOptions, lambda _, state: {"store": state.budget_store()})
FALLBACK = Builtin("fallback", FallbackMiddleware, NoOptions,
                   lambda settings, _: {"configurations": settings.configurations}, takes_options=False)
RATE_LIMIT = Builtin("rate_limit", RateLimitMiddleware, RateLimitOptions,
                     lambda _, state: {"limiter": state.rate_limiter()})
STRUCTURED_OUTPUT = Builtin("structured_output", StructuredOutputMiddleware, NoOptions, takes_options=False)
RETRY = Builtin("retry", RetryMiddleware, RetryOptions)
CIRCUIT_BREAKER = Builtin("circuit_breaker", CircuitBreakerMiddleware, BreakerPolicy,
                          lambda _, state: {"store": state.breaker_store()})
USAGE = Builtin("usage", UsageMiddleware, UsageOptions, lambda _, state: {"journal": state.usage_journal()},
                takes_options=False)
TIMEOUT = Builtin("timeout", TimeoutMiddleware, NoOptions, takes_options=False)
POOL = Builtin("pool", PoolMiddleware, NoOptions,
               lambda settings, state: {"pools": settings.pools, "configurations": settings.configurations,
                                        "state": state.pool_state()},
               takes_options=False, wanted=lambda settings: bool(settings.pools))

BUILTINS: tuple[Builtin[Any], ...] = (DEADLINE, USAGE_HITS, IDEMPOTENCY, CACHE, BUDGET, FALLBACK, RATE_LIMIT,
                                      STRUCTURED_OUTPUT, RETRY, POOL, CIRCUIT_BREAKER, USAGE, TIMEOUT)

# Options that name configurations (where, and how to find the names), checked once parsed.
_CONFIGURATION_NAMES: Mapping[str, tuple[str, Callable[[Any], Iterable[str]]]] = {
    "rate_limit": ("limits", lambda options: options.limits),
    "budget": ("limits: match", lambda options: [b.match for b in options.limits if b.scope == "configuration"]),
}


def section_options(settings: Settings, builtin: Builtin[OptionsT]) -> OptionsT:
    """``[middleware.<name>]`` parsed into the built-in's options; a ``path`` is relative to the file."""
    where = f"{settings.source}: [middleware.{builtin.name}]"
    section = settings.section(builtin.name)
    foreign = store_options(settings, builtin)
    options = options_from(builtin.options, {k: v for k, v in section.items() if k not in foreign}, where)
    if "path" in attrs.fields_dict(builtin.options):  # type: ignore[arg-type]
        located: Any = options
        options = attrs.evolve(located, path=settings.relative_to_file(located.path))
    label, names = _CONFIGURATION_NAMES.get(builtin.name, ("", lambda _: ()))
    known = [*settings.configurations, "*"]
    for identifier in names(options):
        if identifier not in known:
            raise ConfigurationError(f"{where} {label}: {identifier!r} names no configuration"
                                     f"{did_you_mean(identifier, known)}")
    return options


def store_options(settings: Settings, builtin: Builtin[Any]) -> dict[str, Any]:
    """The keys of a section whose ``store`` is a URL that belong to that store: the plugin serving
    the URL checks them (``[middleware.usage] store = "postgresql://..."`` with ``table = ...``)."""
    section = settings.section(builtin.name)
    if not is_store_url(section.get("store")):
        return {}
    own = attrs.fields_dict(builtin.options)
    return {k: v for k, v in section.items() if k not in own and k != "enabled"}


def enabled(settings: Settings, builtin: Builtin[Any]) -> bool:
    """Whether the settings leave ``builtin`` on (``enabled = false`` turns it off)."""
    return settings.enabled(builtin.name) and builtin.wanted(settings)


def builtin_middleware(settings: Settings, state: State) -> list[Middleware]:
    """The enabled built-ins, configured from ``settings`` and handed their stores by ``state``."""
    built = []
    for builtin in (b for b in BUILTINS if enabled(settings, b)):
        options = section_options(settings, builtin)
        args = (options,) if builtin.takes_options else ()
        built.append(builtin.cls(*args, **builtin.inject(settings, state)))
    return built
