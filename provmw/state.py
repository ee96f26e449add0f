"""Where each concern keeps its state, decided in one place (ADR 0013).

:func:`open_state` reads the settings once: a concern listed in ``[state] shared`` uses the
shared backend a plugin serves (Redis), every other one the embedded backend (memory, and
SQLite files for budgets and the ledger), except the ledger when ``[middleware.usage] store`` is
a URL: a plugin serves it (PostgreSQL, for a fleet). The resulting :class:`State` hands each store out,
wrapped by the outage rule of :mod:`provmw.stores.outage`, to the built-in middleware and to
``provmw usage`` / ``provmw budget`` alike; the manager closes it last.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, TypeVar

from provmw.errors import ConfigurationError
from provmw.middleware import BUDGET, CACHE, IDEMPOTENCY, USAGE, section_options
from provmw.stores.embedded import EmbeddedState, SqliteFile
from provmw.stores.outage import (
    BudgetFailurePolicy,
    GuardedBreakers,
    GuardedBudgets,
    GuardedCache,
    GuardedPoolState,
    GuardedRateLimiter,
)
from provmw.stores.shared import masked_url
from provmw.stores.usage.journal import FailurePolicy, UsageJournal
from provmw.stores.usage.spill import SpillFile

if TYPE_CHECKING:
    from provmw.settings import Settings
    from provmw.stores.breakers import BreakerStore
    from provmw.stores.budgets import BudgetStore
    from provmw.stores.cache import CacheStore
    from provmw.stores.pools import PoolState
    from provmw.stores.rate_limits import RateLimiter
    from provmw.stores.shared import StateBackend
    from provmw.stores.usage import UsageStore

__all__ = ["State", "open_state"]

T = TypeVar("T")


class State:
    """Each concern's store, made on first use and closed with the manager.

    ``shared`` serves the concerns in ``shared_concerns``; ``embedded`` serves the rest and
    stands in for the shared breakers and rate limits while their store is unreachable.
    ``ledger``, when given, is the usage store a plugin serves (a fleet's ledger), used
    instead of the embedded one; ``ledger_spill`` is the local file that keeps what it cannot
    take (a SQLite ledger declares its own).
    """

    def __init__(self, embedded: EmbeddedState | None = None, shared: StateBackend | None = None, *,
                 shared_concerns: Collection[str] = (), budget_failure_policy: BudgetFailurePolicy = "fail_closed",
                 journal_policy: FailurePolicy = "fail_open", journal_max_records: int = 50_000,
                 ledger: UsageStore | None = None, ledger_spill: SpillFile | None = None) -> None:
        self.embedded = embedded if embedded is not None else EmbeddedState()
        self.shared = shared
        self.ledger = ledger
        self.shared_concerns = frozenset(shared_concerns) if shared is not None else frozenset()
        self._budget_policy = budget_failure_policy
        self._journal_options: dict[str, Any] = {"policy": journal_policy, "max_records": journal_max_records,
                                                 "spill": ledger_spill}
        self._made: dict[str, Any] = {}

    def cache_store(self) -> CacheStore:
        return self._once("cache", lambda: GuardedCache(self._backend("cache").cache_store()))

    def idempotency_store(self) -> CacheStore:
        """Where first answers wait for repeats of their ``idempotency_key``: a store of its own, so
        the response cache's evictions never forget one."""
        shared = self._shared("idempotency")
        make: Callable[[], CacheStore] = self.embedded.idempotency_store if shared is None else shared.cache_store
        return self._once("idempotency", lambda: GuardedCache(make()))

    def budget_store(self) -> BudgetStore:
        return self._once("budget", lambda: GuardedBudgets(self._backend("budget").budget_store(),
                                                           self._budget_policy))

    def breaker_store(self) -> BreakerStore:
        shared, local = self._shared("circuit_breaker"), self.embedded.breaker_store
        make: Callable[[], BreakerStore] = local if shared is None else \
            lambda: GuardedBreakers(shared.breaker_store(), local())
        return self._once("circuit_breaker", make)

    def rate_limiter(self) -> RateLimiter:
        shared, local = self._shared("rate_limit"), self.embedded.rate_limiter
        make: Callable[[], RateLimiter] = local if shared is None else \
            lambda: GuardedRateLimiter(shared.rate_limiter(), local())
        return self._once("rate_limit", make)

    def pool_state(self) -> PoolState:
        """The pools' load, latency, affinity and cool-downs: shared where ``[state] shared`` lists
        ``pool`` and the backend serves it, else this process's."""
        shared, local = self._shared("pool"), self.embedded.pool_state
        serve = getattr(shared, "pool_state", None)
        make: Callable[[], PoolState] = local if serve is None else lambda: GuardedPoolState(serve(), local())
        return self._once("pool", make)

    def usage_journal(self) -> UsageJournal:
        """The ledger's journal, shared by ``usage`` and ``usage_hits``."""
        return self._once("usage", lambda: UsageJournal(self._ledger(), write_ahead=self._write_ahead(),
                                                        **self._journal_options))

    async def aclose(self) -> None:
        """Write what the ledger's journal still holds, close every store made (the budgets', the pools'),
        then the shared backend."""
        journal, budgets = self._made.pop("usage", None), self._made.pop("budget", None)
        pools = self._made.pop("pool", None)  # a shared one writes its pending starts and ends first
        try:
            if journal is not None:
                await journal.aclose()
            elif self.ledger is not None:
                await self.ledger.aclose()
        finally:
            try:
                for store in (budgets, pools):
                    if store is not None:
                        await store.aclose()
            finally:
                if self.shared is not None:
                    await self.shared.aclose()

    def _write_ahead(self) -> bool:
        """A call waits for no commit when the ledger is the embedded SQLite file at ``synchronous =
        "normal"``: its write-ahead file survives kill -9 as that file does (ADR 0027)."""
        ledger = self.embedded.ledger
        return self.ledger is None and ledger is not None and ledger.synchronous == "NORMAL"

    def _ledger(self) -> UsageStore:
        return self.ledger if self.ledger is not None else self.embedded.usage_store()

    def _shared(self, concern: str) -> StateBackend | None:
        return self.shared if concern in self.shared_concerns else None

    def _backend(self, concern: str) -> StateBackend | EmbeddedState:
        return self._shared(concern) or self.embedded

    def _once(self, concern: str, make: Callable[[], T]) -> T:
        made = self._made.get(concern)
        if made is None:
            made = self._made[concern] = make()
        return made


def open_state(settings: Settings, shared: StateBackend | None = None, *, ledger: UsageStore | None = None) -> State:
    """The state ``settings`` describe; ``shared`` is the backend serving ``[state]``, if any, and
    ``ledger`` the store serving ``[middleware.usage] store`` when it is a URL (both from the plugin
    host: ``collect_state`` and ``collect_ledger``)."""
    budget = section_options(settings, BUDGET)
    usage = section_options(settings, USAGE)
    cache = section_options(settings, CACHE)
    idempotency = section_options(settings, IDEMPOTENCY)
    if ledger is None and usage.store not in ("sqlite", "memory"):
        raise ConfigurationError(f"{settings.source}: [middleware.usage] store: {masked_url(usage.store)} is a "
                                 "ledger a plugin serves; open the state with PluginHost.collect_ledger(settings)")
    embedded = EmbeddedState(
        budgets=SqliteFile(budget.path, budget.busy_timeout_s, "FULL" if budget.synchronous == "full" else "NORMAL",
                           budget.calls_per_block)
        if budget.store == "sqlite" else None,
        ledger=SqliteFile(usage.path, usage.busy_timeout_s, "FULL" if usage.synchronous == "full" else "NORMAL")
        if usage.store == "sqlite" else None,
        cache_max_entries=cache.max_entries, cache_max_bytes=cache.max_bytes,
        idempotency_max_entries=idempotency.max_entries, idempotency_max_bytes=idempotency.max_bytes)
    return State(embedded, shared, shared_concerns=settings.state.shared if settings.state else (),
                 budget_failure_policy=budget.failure_policy, journal_policy=usage.failure_policy,
                 journal_max_records=usage.max_journal_records, ledger=ledger,
                 ledger_spill=SpillFile(f"{usage.path}.spill", fsync=usage.synchronous == "full") if ledger else None)
