"""Shared state: one cache, budget, breaker, rate-limit and pool state for many processes and hosts.

A plugin serves it (``provmw-redis`` for ``redis://`` and ``rediss://``); the settings
name it by URL, and the URL's scheme picks the plugin::

    [state]
    url = "redis://127.0.0.1:6379/0"
    shared = ["budget", "cache", "circuit_breaker", "idempotency", "pool", "rate_limit"]   # the default: all
    # every other key is the backend's own (key_prefix, timeout_s, signing_key_env, ...)

Concerns left out of ``shared`` keep their embedded store (memory, or SQLite for budgets).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import attrs

from provmw.config import did_you_mean
from provmw.context import FrozenMap
from provmw.errors import ConfigurationError
from provmw.scrubbing import masked_url

if TYPE_CHECKING:
    from provmw.stores.breakers import BreakerStore
    from provmw.stores.budgets import BudgetStore
    from provmw.stores.cache import CacheStore
    from provmw.stores.rate_limits import RateLimiter

__all__ = ["SHARED_CONCERNS", "StateBackend", "StateSettings", "masked_url"]

SHARED_CONCERNS = ("budget", "cache", "circuit_breaker", "idempotency", "pool", "rate_limit")


def _concerns(value: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ConfigurationError(f"shared must be a list of {', '.join(SHARED_CONCERNS)}, got {value!r}")
    for name in value:
        if name not in SHARED_CONCERNS:
            raise ConfigurationError(f"shared: {name!r} is not one of {', '.join(SHARED_CONCERNS)}"
                                     f"{did_you_mean(str(name), SHARED_CONCERNS)}")
    return tuple(value)


@attrs.frozen
class StateSettings:
    """The ``[state]`` section: the backend's URL, what it shares, and the backend's own keys."""

    url: str = attrs.field(repr=False)  # may carry a password
    shared: tuple[str, ...] = attrs.field(default=SHARED_CONCERNS, converter=_concerns)
    options: FrozenMap = attrs.field(factory=FrozenMap, converter=FrozenMap)

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme

    @property
    def shown_url(self) -> str:
        """The URL with its password masked, for display."""
        return masked_url(self.url)

    @classmethod
    def from_table(cls, table: Mapping[str, Any], source: str) -> StateSettings:
        url = table.get("url")
        if not isinstance(url, str) or not urlsplit(url).scheme:
            raise ConfigurationError(f"{source}: [state] url: needs a URL such as 'redis://127.0.0.1:6379/0'")
        options = {k: v for k, v in table.items() if k not in ("url", "shared")}
        try:
            return cls(url, table.get("shared", SHARED_CONCERNS), options)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{source}: [state] {exc}") from None


class StateBackend(Protocol):
    """What a state plugin returns from ``provmw_state_backend``: the shared stores, and their
    common connection, closed with the manager. A backend may also offer ``async
    budget_problems() -> list[str]``: what ``provmw check`` lists against budgets kept there
    (Redis: no persistence, so a restart forgets the spend); and ``pool_state() -> PoolState``, the
    pools' shared load (ADR 0051), used when ``[state] shared`` lists ``pool``."""

    def cache_store(self) -> CacheStore: ...

    def budget_store(self) -> BudgetStore: ...

    def breaker_store(self) -> BreakerStore: ...

    def rate_limiter(self) -> RateLimiter: ...

    async def aclose(self) -> None: ...
