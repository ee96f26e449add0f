"""Settles a budget store could not take (an outage), kept in memory until it answers again.

A settle that fails is kept, oldest first, and written again before the next reserve, settle
or report: so the spend of the calls that returned during an outage lands in the buckets
before the next call is admitted, instead of being dropped while its reservation's lease
frees the hold. A store keeps a reservation settleable for a day past its lease
(``KEEP_EXPIRED_S``), so a settle written later counts nothing; a settle written twice counts
once (it deletes its reservation), so writing again is always safe.

At most ``bound`` settles are kept. Past that a failing settle is dropped: logged (the first
of each outage at ERROR, with its amounts), counted in ``dropped``; its spend is then only in
the usage ledger, and its bucket under-counts it. What is still kept when the store closes
is logged the same way.
"""

from __future__ import annotations

import asyncio
import logging

from provmw.stores.budgets import Amounts, BudgetStore

__all__ = ["MAX_KEPT_SETTLES", "KeptSettles"]

log = logging.getLogger("provmw.stores.outage")

MAX_KEPT_SETTLES = 10_000  # about 2 MB: minutes of a busy process's settles
_AT_ONCE = 64  # written together: a long outage's settles land in round trips of this many


class KeptSettles:
    """Failed settles, oldest first, until the store takes them (see the module's text)."""

    def __init__(self, bound: int = MAX_KEPT_SETTLES) -> None:
        self._kept: dict[str, Amounts] = {}
        self._unreserved: set[str] = set()
        self._bound = bound
        self._writing = False
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._kept)

    def unreserved(self, reservation_id: str) -> None:
        """A call let through uncounted (``fail_open``): the store holds nothing its settle could settle."""
        if len(self._unreserved) < self._bound:  # past it, their settles are merely tried for nothing
            self._unreserved.add(reservation_id)

    def was_unreserved(self, reservation_id: str) -> bool:
        """Whether ``reservation_id`` was let through uncounted (then forgotten: it settles once)."""
        if reservation_id in self._unreserved:
            self._unreserved.discard(reservation_id)
            return True
        return False

    def keep(self, reservation_id: str, actual: Amounts) -> None:
        """Keep a settle the store failed to take, or drop it past the bound (the outage itself is
        logged by the guard)."""
        if len(self._kept) < self._bound or reservation_id in self._kept:
            self._kept[reservation_id] = actual
            return
        self.dropped += 1
        if self.dropped == 1:
            log.error("budget: %d settles kept already; settle of %s dropped (%d micro-USD, %d tokens): its bucket "
                      "does not count it, the usage ledger does", self._bound, reservation_id,
                      actual.cost_micro_usd, actual.tokens)

    async def write(self, store: BudgetStore) -> None:
        """Write the kept settles to ``store``, oldest first, until it fails again; one caller at a time."""
        if not self._kept or self._writing:
            return
        self._writing = True
        written = 0
        try:
            while self._kept:
                batch = list(self._kept.items())[:_AT_ONCE]
                results = await asyncio.gather(*(store.settle(rid, actual) for rid, actual in batch),
                                               return_exceptions=True)
                for (rid, _), result in zip(batch, results, strict=True):
                    if not isinstance(result, BaseException):
                        del self._kept[rid]
                        written += 1
                if any(isinstance(result, BaseException) for result in results):
                    return  # still failing: the next step tries again
        finally:
            self._writing = False
            if written:
                log.warning("budget: %d settles kept through an outage written (%d still kept, %d dropped)",
                            written, len(self._kept), self.dropped)

    def abandon(self) -> None:
        """The store closes: log what is still kept, as lost to the buckets."""
        if self._kept:
            cost = sum(actual.cost_micro_usd for actual in self._kept.values())
            log.error("budget: %d settles (%d micro-USD) never reached the store before it closed: its buckets "
                      "do not count them, the usage ledger does", len(self._kept), cost)
            self._kept.clear()
