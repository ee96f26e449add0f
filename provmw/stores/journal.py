"""The usage journal: records wait here until the store has them, so a store outage loses nothing.

``record`` never blocks and never raises: it keys the record by ``(correlation_id,
attempt)`` and wakes one background writer, which sends batches to the store and
forgets a record only once the store has acknowledged it. A failing store is retried
with capped backoff; since writes are idempotent per key, a batch replayed after an
unclear failure cannot count twice.

When the store keeps failing, the policy decides what a full journal means:

``fail_open``
    calls go on; a record that finds the journal full is dropped and counted
    (``dropped``), with an error logged, so availability wins past the bound.
``fail_closed``
    ``admit`` refuses new calls with ``UsageLedgerUnavailableError`` before they reach a
    provider; records of calls already running are still kept, so nothing is lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Literal

from provmw.errors import UsageLedgerUnavailableError
from provmw.stores.usage import UsageRecord, UsageStore

__all__ = ["FailurePolicy", "UsageJournal"]

log = logging.getLogger(__name__)

FailurePolicy = Literal["fail_open", "fail_closed"]


class UsageJournal:
    """Holds records until ``store`` acknowledges them; owned by the manager's state, shared by
    ``usage`` and ``usage_hits``."""

    def __init__(self, store: UsageStore, *, max_records: int = 50_000, policy: FailurePolicy = "fail_open",
                 batch_size: int = 500, retry_s: float = 0.05, max_retry_s: float = 5.0,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.store = store
        self.max_records = max_records
        self.policy = policy
        self.dropped = 0
        self._batch_size = batch_size
        self._retry_s = retry_s
        self._max_retry_s = max_retry_s
        self._sleep = sleep
        self._pending: dict[tuple[str, int], UsageRecord] = {}
        self._writer: asyncio.Task[None] | None = None
        self._failing = False

    @property
    def pending(self) -> int:
        """Records not yet acknowledged by the store."""
        return len(self._pending)

    def admit(self) -> None:
        """Refuse a new call when a fail-closed journal is full."""
        if self.policy == "fail_closed" and len(self._pending) >= self.max_records:
            raise UsageLedgerUnavailableError(
                f"usage ledger: the store is failing and {len(self._pending)} records wait in the journal "
                f"(max_journal_records={self.max_records}); refusing new calls (failure_policy=fail_closed)")

    def record(self, record: UsageRecord) -> None:
        """Keep ``record`` until the store has it; never blocks, never raises."""
        if self.policy == "fail_open" and len(self._pending) >= self.max_records \
                and record.key not in self._pending:
            self.dropped += 1
            log.error("usage ledger: journal full (%d records) while the store fails; dropped the record "
                      "of %s attempt %d (%d dropped so far)", self.max_records, *record.key, self.dropped)
            return
        self._pending.setdefault(record.key, record)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_all(), name="provmw-usage-writer")

    async def flush(self) -> None:
        """Wait until every record so far is written (forever, while the store keeps failing)."""
        if self._writer is not None:
            await asyncio.shield(self._writer)

    async def aclose(self, timeout_s: float = 10.0) -> None:
        """Write what is pending (for at most ``timeout_s``), then close the store."""
        try:
            await asyncio.wait_for(self.flush(), timeout_s)
        except TimeoutError:
            log.error("usage ledger: closing with %d records the store never acknowledged", len(self._pending))
        if self._writer is not None:
            self._writer.cancel()
        await self.store.aclose()

    async def _write_all(self) -> None:
        delay = self._retry_s
        while self._pending:
            batch = list(self._pending.values())[: self._batch_size]
            try:
                await self.store.write(batch)
            except Exception as exc:  # the store is down: keep everything, try again later
                if not self._failing:
                    log.warning("usage ledger: store write failed (%s: %s); keeping records in the journal",
                                type(exc).__name__, exc)
                self._failing = True
                await self._sleep(delay)
                delay = min(delay * 2, self._max_retry_s)
                continue
            if self._failing:
                log.warning("usage ledger: store is back; writing %d journaled records", len(self._pending))
            self._failing, delay = False, self._retry_s
            for written in batch:
                self._pending.pop(written.key, None)
