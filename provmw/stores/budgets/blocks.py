"""Blocks of budget: one transaction reserves room for many calls of this process (ADR 0035).

``BudgetBlocks`` in front of a ``SqliteBudgetStore`` at ``NORMAL`` reserves, per bucket, a
block: room for ``calls_per_block`` calls like the one asking, as one reservation in the file
under a ``block-`` id, which every other process sees as held. The calls that follow take
their share of it in memory. A block holds at most 1/16 of any of its bucket's limits; it
closes after ``max_age_s`` (or a quarter of its lease) or when a call does not fit. A closed
block settles, with what its calls spent, once no call is in it; until then it is cut down
to what its calls in flight hold. Each call's settle writes the block's running total to the
settle journal (one ``os.write``), so a process killed with blocks open loses nothing.

Calls reserve one by one where blocks do not pay: a call over 1/32 of a limit, and, for
``tight_s`` after a bucket refused a block, every call on it. A strict budget is never
overspent; near a limit, another process's open block may refuse a call up to 1/16 of the
limit early, until it closes.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Coroutine, Sequence
from typing import Any

import attrs

from provmw.stores.budgets import DIMENSIONS, Amounts, BucketState, Charge, Refusal, one_per_bucket
from provmw.stores.budgets.block_room import Block, Closing, as_calls, give_back
from provmw.stores.budgets.settles import BLOCK
from provmw.stores.budgets.sqlite import SqliteBudgetStore

__all__ = ["BudgetBlocks"]

log = logging.getLogger(__name__)
_MAX_SHARE = 16  # a block holds at most this fraction (1/16) of each of its bucket's limits
_TIGHT_KEPT = 1024  # buckets remembered as tight before the expired ones are forgotten


@attrs.define(eq=False)
class _Call:
    parts: list[tuple[Block, Amounts]]  # its share of each block it entered
    own: list[str]  # its reservations of its own in the file


class BudgetBlocks:
    """A ``BudgetStore`` that reserves this process's calls in blocks over a ``SqliteBudgetStore``."""

    def __init__(self, store: SqliteBudgetStore, *, calls_per_block: int = 16, max_age_s: float = 1.0,
                 tight_s: float = 1.0) -> None:
        self.store = store
        self._calls_per_block, self._max_age_s, self._tight_s = calls_per_block, max_age_s, tight_s
        self._blocks: dict[str, Block] = {}  # bucket key -> the block calls enter now
        self._unsettled: set[Block] = set()  # every block whose settle is not yet in the store
        self._failed: set[Block] = set()  # of those, the ones whose settle failed: tried again later
        self._calls: dict[str, _Call] = {}  # reservation id -> what it holds
        self._tight: dict[str, float] = {}  # bucket key -> until when its calls reserve one by one
        # bucket key -> the loop and the future of the block being reserved: a burst waits for it
        self._coming: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = {}
        self._lock = threading.Lock()  # for steps on two threads; never held across an await
        self._tasks: set[asyncio.Task[None]] = set()
        self._retrying = self._closed = False
        self._next_close = math.inf  # the soonest a current block closes: each step closes those past it
        _all.add(self)

    def _forget(self) -> None:
        """In a forked child: the parent's blocks are the parent's (and so is its lock, perhaps held)."""
        self._lock = threading.Lock()
        for held in (self._blocks, self._calls, self._tight, self._coming):
            held.clear()
        self._unsettled, self._failed, self._tasks, self._retrying = set(), set(), set(), False
        self._next_close = math.inf

    async def reserve(self, reservation_id: str, charges: Sequence[Charge], *, now: float,
                      lease_s: float) -> Refusal | None:
        parts: list[tuple[Block, Amounts]] = []
        one_by_one: list[Charge] = []
        wanting: list[tuple[Charge, int]] = []
        closing = Closing()
        with self._lock:
            if now >= self._next_close:  # a block whose timer went with its loop closes here
                self._close_due(now, closing)
            for charge in one_per_bucket(charges):
                key = charge.bucket.key
                calls = self._calls_per(charge)
                if calls < 2 or self._tight.get(key, -1.0) > now:
                    one_by_one.append(charge)
                    continue
                block = self._blocks.get(key)
                if block is not None and now < block.closes_at and block.fits(charge.amount):
                    block.enter(charge.amount)
                    parts.append((block, charge.amount))
                    continue
                if block is not None:  # full or old: closed, so that its room left is free for the next
                    del self._blocks[key]
                    closing.add(block)
                wanting.append((charge, calls))
        call = _Call(parts, [])
        try:
            await self._finish(closing)
            # A call refused by the buckets it reserves on its own takes no block first.
            if one_by_one:
                refusal = await self.store.reserve(reservation_id, one_by_one, now=now, lease_s=lease_s)
                if refusal is not None:
                    await self._release(call)
                    return refusal
                call.own.append(reservation_id)
            refused = [charge for charge, calls in wanting
                       if not await self._enter_a_block(call, charge, calls, now, lease_s)]
            if refused:
                refusal = await self.store.reserve(f"{reservation_id}+", refused, now=now, lease_s=lease_s)
                if refusal is not None:
                    await self._release(call)
                    return refusal
                call.own.append(f"{reservation_id}+")
        except BaseException:
            await self._release(call)
            raise
        with self._lock:
            self._calls[reservation_id] = call
        return None

    async def renew(self, reservation_id: str, *, now: float, lease_s: float) -> None:
        call = self._calls.get(reservation_id)
        if call is None:
            await self.store.renew(reservation_id, now=now, lease_s=lease_s)
            return
        for block, _ in call.parts:
            if block.expires_at - now < lease_s / 2:  # another of its calls may have renewed it already
                await self.store.renew(block.id, now=now, lease_s=lease_s)
                block.expires_at = max(block.expires_at, now + lease_s)
        for own in call.own:
            await self.store.renew(own, now=now, lease_s=lease_s)

    async def settle(self, reservation_id: str, actual: Amounts) -> None:
        with self._lock:
            call = self._calls.pop(reservation_id, None)
        if call is None:  # reserved by another handle, settled already, or unknown: the store decides
            await self.store.settle(reservation_id, actual)
            return
        await self._leave(call, actual)

    async def states(self, *, now: float) -> list[BucketState]:
        """The file's figures, every block closed first; those still in flight count as their calls."""
        closing = Closing()
        with self._lock:
            for block in self._blocks.values():
                closing.add(block)
            self._blocks.clear()
        await self._finish(closing)
        states = await self.store.states(now=now)
        with self._lock:
            live = [block for block in self._unsettled if now < block.expires_at]
        for block in live:
            states = [as_calls(state, block) if state.bucket == block.bucket else state for state in states]
        return states

    async def aclose(self) -> None:
        """Settle the blocks no call is in; one a call is still in holds only what its calls need, and
        settles (journaled, as any settle after the store closed) when they are over."""
        try:
            closing = Closing()
            with self._lock:
                for block in self._unsettled:
                    closing.add(block)
                self._blocks.clear()
            await self._finish(closing)
            await asyncio.gather(*self._tasks)
        finally:
            self._closed = True  # no timer acts on a closed store; a late settle still journals
            await self.store.aclose()

    def _calls_per(self, charge: Charge) -> int:
        """How many calls like this one a block of its bucket holds (under 2: it reserves on its own)."""
        calls = self._calls_per_block
        for dimension in DIMENSIONS:
            limit, amount = getattr(charge.limits, dimension), getattr(charge.amount, dimension)
            if limit is not None and amount > 0:
                calls = min(calls, limit // (_MAX_SHARE * amount))
        return calls

    async def _enter_a_block(self, call: _Call, charge: Charge, calls: int, now: float, lease_s: float) -> bool:
        """Enter the block another task is reserving for the bucket, or reserve one; False when the
        bucket refuses a block."""
        key, loop = charge.bucket.key, asyncio.get_running_loop()
        while (coming := self._coming.get(key)) is not None and coming[0] is loop:
            await asyncio.shield(coming[1])
            with self._lock:
                block = self._blocks.get(key)
                if block is not None and now < block.closes_at and block.fits(charge.amount):
                    block.enter(charge.amount)
                    call.parts.append((block, charge.amount))
                    return True
                if self._tight.get(key, -1.0) > now:
                    return False
        future = loop.create_future()
        self._coming[key] = (loop, future)
        try:
            entered = await self._enter_new_block(call, charge, calls, now, lease_s)
        except Exception as exc:  # the file is locked or broken: the burst fails with it, not in turn
            future.set_exception(exc)
            future.exception()  # retrieved: no warning when nobody waited
            raise
        finally:
            if self._coming.get(key) == (loop, future):
                del self._coming[key]
            if not future.done():
                future.set_result(None)
        return entered

    async def _enter_new_block(self, call: _Call, charge: Charge, calls: int, now: float, lease_s: float) -> bool:
        """Reserve a block for ``calls`` calls like ``charge`` and enter it; False when the bucket refuses it."""
        a = charge.amount
        held = Amounts(a.cost_micro_usd * calls, a.tokens * calls, a.requests * calls)
        block_id = f"{BLOCK}{os.urandom(12).hex()}"
        if await self.store.reserve(block_id, [Charge(charge.bucket, charge.limits, held)], now=now,
                                    lease_s=lease_s) is not None:
            with self._lock:
                if len(self._tight) >= _TIGHT_KEPT:
                    self._tight = {key: until for key, until in self._tight.items() if until > now}
                self._tight[charge.bucket.key] = now + self._tight_s
            return False
        open_s = min(self._max_age_s, lease_s / 4)
        block = Block(block_id, charge.bucket, charge.limits, [held.cost_micro_usd, held.tokens, held.requests],
                       now + lease_s, now + open_s)
        closing = Closing()
        with self._lock:
            block.enter(a)
            call.parts.append((block, a))
            self._unsettled.add(block)
            replaced = self._blocks.get(charge.bucket.key)  # another thread's, taken meanwhile
            self._blocks[charge.bucket.key] = block
            self._next_close = min(self._next_close, block.closes_at)
            if replaced is not None:
                closing.add(replaced)
        asyncio.get_running_loop().call_later(open_s, self._close_idle, block)
        await self._finish(closing)
        return True

    async def _leave(self, call: _Call, actual: Amounts) -> None:
        closing = Closing()
        on_their_own: list[tuple[Block, Amounts]] = []
        with self._lock:
            for block, amount in call.parts:
                block.account(amount, actual)
                if not (block.closed and block.calls == 1):  # the block goes on: its total, journaled
                    try:  # durable before the settle returns; under the lock, so totals are written in order
                        self.store.running(block.id, block.total)
                    except OSError as exc:
                        log.warning("budget %s: settle journal unwritable (%s); committing the settle now",
                                    self.store.db.path, exc)
                        block.take_back(amount, actual)
                        block.carving += 1
                        on_their_own.append((block, amount))  # still in the block until committed
                        continue
                if block.leave():
                    closing.to_settle.append(block)
                elif block.closed and time.monotonic() - block.closed_at >= self._max_age_s:
                    closing.cut(block)  # long calls: perhaps room to give back (short ones are over by now)
        for block, amount in on_their_own:
            try:
                await self.store.settle_part(block.id, amount, actual)
            except BaseException as exc:
                with self._lock:
                    block.take_back(amount, actual, sign=-1)  # the block's again: its settle counts it
                if not isinstance(exc, Exception):
                    raise
                log.error("budget %s: committing a call of block %s failed too (%s); the block's settle "
                          "counts it", self.store.db.path, block.id, exc)
            finally:
                with self._lock:
                    block.carving -= 1
                    if block.leave():
                        closing.to_settle.append(block)
        await self._finish(closing)
        for own in call.own:
            await self.store.settle(own, actual)

    async def _release(self, call: _Call) -> None:
        """Undo what a refused (or failed) reserve took."""
        closing = Closing()
        with self._lock:
            closing.to_settle = [block for block, amount in call.parts if give_back(block, amount)]
        await self._finish(closing)
        for own in call.own:
            await self.store.settle(own, Amounts())

    async def _finish(self, closing: Closing) -> None:
        """Settle the closed blocks no call is in (and those whose settle failed before), then cut the
        others down to what their calls still need."""
        if closing.to_settle or self._failed:
            await self._settle_blocks(closing.to_settle)
        for block, needs in closing.to_cut:
            try:
                await self.store.shrink(block.id, needs)
            except Exception as exc:  # it holds its whole room a little longer, until its calls are over
                log.warning("budget %s: could not give back block %s's room (%s)", self.store.db.path, block.id, exc)
            else:
                with self._lock:
                    block.held = [min(h, n) for h, n in zip(block.held, attrs.astuple(needs), strict=True)]

    async def _settle_blocks(self, blocks: Sequence[Block]) -> None:
        """Settle ``blocks``, and those whose settle failed before; one that fails (or that a cancellation
        leaves) is tried again later, its calls' totals in the journal meanwhile."""
        with self._lock:
            pending = [*self._failed, *blocks]
            self._failed.clear()
        failed: list[Block] = []
        try:
            while pending:
                block = pending[0]
                try:
                    await self.store.settle(block.id, block.total)
                except Exception as exc:
                    log.warning("budget %s: settling block %s failed (%s); trying again in %.1f s",
                                self.store.db.path, block.id, exc, self._max_age_s)
                    failed.append(block)
                else:
                    with self._lock:
                        self._unsettled.discard(block)
                pending.pop(0)
        finally:
            if failed or pending:
                with self._lock:
                    self._failed.update([*failed, *pending])
                self._retry_later()

    def _retry_later(self) -> None:
        if self._retrying:
            return
        self._retrying = True

        def retry() -> None:
            self._retrying = False
            if not self._closed:
                self._spawn(self._settle_blocks([]))

        asyncio.get_running_loop().call_later(self._max_age_s, retry)

    def _close_due(self, now: float, closing: Closing) -> None:
        """Close the current blocks past their time (under the lock)."""
        for key, block in list(self._blocks.items()):
            if now >= block.closes_at:
                del self._blocks[key]
                closing.add(block)
        self._next_close = min((block.closes_at for block in self._blocks.values()), default=math.inf)

    def _close_idle(self, block: Block) -> None:
        """Close a block at its time; while calls are still in it, look again every ``max_age_s``
        for room to give back."""
        if self._closed:
            return
        closing = Closing()
        with self._lock:
            if self._blocks.get(block.bucket.key) is block:
                del self._blocks[block.bucket.key]
            closing.add(block)
            again = not block.settling
        if closing:
            self._spawn(self._finish(closing))
        if again:
            asyncio.get_running_loop().call_later(self._max_age_s, self._close_idle, block)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


# Every instance, so that a forked child forgets its parent's blocks (see _settles: one hook for all).
_all: weakref.WeakSet[BudgetBlocks] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for blocks in list(_all):
        blocks._forget()


os.register_at_fork(after_in_child=_after_fork_in_child)
