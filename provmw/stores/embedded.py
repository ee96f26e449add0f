"""The embedded state backend: memory for the cache, breakers and rate limits, SQLite (or memory)
for budgets and the usage ledger. It serves the same ``StateBackend`` interface as a shared one."""

from __future__ import annotations

import attrs

from provmw.stores._sqlite import Synchronous
from provmw.stores.breakers import MemoryBreakerStore
from provmw.stores.budgets import BudgetStore, MemoryBudgetStore
from provmw.stores.budgets.blocks import BudgetBlocks
from provmw.stores.budgets.sqlite import SqliteBudgetStore
from provmw.stores.cache import MemoryCacheStore
from provmw.stores.pools import MemoryPoolState
from provmw.stores.rate_limits import MemoryRateLimiter
from provmw.stores.usage import MemoryUsageStore, SqliteUsageStore, UsageStore

__all__ = ["EmbeddedState", "SqliteFile"]


@attrs.frozen
class SqliteFile:
    """Where a SQLite store lives, how long a write waits for another process's lock, and (for
    the ledger) whether a commit is synced to disk (``FULL``) or to the OS (``NORMAL``)."""

    path: str
    busy_timeout_s: float = 5.0
    synchronous: Synchronous = "NORMAL"
    calls_per_block: int = 16  # budgets: calls a process reserves room for at once (ADR 0035); 1: one by one


@attrs.frozen(kw_only=True)
class EmbeddedState:
    """This process's stores; budgets and the ledger in SQLite files, or in memory when None."""

    budgets: SqliteFile | None = None
    ledger: SqliteFile | None = None
    cache_max_entries: int = 10_000
    cache_max_bytes: int = 64 * 1024 * 1024
    idempotency_max_entries: int = 100_000
    idempotency_max_bytes: int = 256 * 1024 * 1024

    def cache_store(self) -> MemoryCacheStore:
        return MemoryCacheStore(max_entries=self.cache_max_entries, max_bytes=self.cache_max_bytes)

    def idempotency_store(self) -> MemoryCacheStore:
        return MemoryCacheStore(max_entries=self.idempotency_max_entries, max_bytes=self.idempotency_max_bytes)

    def budget_store(self) -> BudgetStore:
        if self.budgets is None:
            return MemoryBudgetStore()
        store = SqliteBudgetStore(self.budgets.path, busy_timeout_s=self.budgets.busy_timeout_s,
                                  synchronous=self.budgets.synchronous)
        # At FULL every settle is on disk before the call goes on: a block's running total would need the same.
        if self.budgets.calls_per_block > 1 and self.budgets.synchronous == "NORMAL":
            return BudgetBlocks(store, calls_per_block=self.budgets.calls_per_block)
        return store

    def breaker_store(self) -> MemoryBreakerStore:
        return MemoryBreakerStore()

    def rate_limiter(self) -> MemoryRateLimiter:
        return MemoryRateLimiter()

    def pool_state(self) -> MemoryPoolState:
        return MemoryPoolState()

    def usage_store(self) -> UsageStore:
        if self.ledger is None:
            return MemoryUsageStore()
        return SqliteUsageStore(self.ledger.path, busy_timeout_s=self.ledger.busy_timeout_s,
                                synchronous=self.ledger.synchronous)

    async def aclose(self) -> None:
        """Nothing to close: each store it made is closed by its owner."""
