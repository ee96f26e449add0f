"""A block of budget's bookkeeping (ADR 0035): what it holds in the file, what its calls in flight
hold of it and what its settled calls spent, per dimension; ``budget_blocks`` runs the blocks."""

from __future__ import annotations

import time

import attrs

from provmw.stores.budgets import DIMENSIONS, Amounts, BucketId, BucketState, Limits

__all__ = ["Block", "Closing", "as_calls", "give_back"]


@attrs.define(eq=False)
class Block:
    id: str
    bucket: BucketId
    limits: Limits
    held: list[int]  # reserved in the file, per dimension
    expires_at: float  # the block's lease in the file
    closes_at: float  # no call enters after this
    taken: list[int] = attrs.Factory(lambda: [0, 0, 0])  # the calls in flight hold this much of it
    spent: list[int] = attrs.Factory(lambda: [0, 0, 0])  # the settled calls spent this
    calls: int = 0  # in flight
    carving: int = 0  # calls being committed on their own (``take_back``), not yet in the file
    closed: bool = False
    closed_at: float = 0.0  # time.monotonic() when it closed
    settling: bool = False  # its settle has been handed to the store

    def fits(self, amount: Amounts) -> bool:
        """Whether a call holding ``amount`` has room, in each limited dimension the block holds any of."""
        limits, held, taken, spent = self.limits, self.held, self.taken, self.spent
        return ((limits.cost_micro_usd is None or not held[0] or taken[0] + spent[0] + amount.cost_micro_usd <= held[0])
                and (limits.tokens is None or not held[1] or taken[1] + spent[1] + amount.tokens <= held[1])
                and (limits.requests is None or not held[2] or taken[2] + spent[2] + amount.requests <= held[2]))

    def enter(self, amount: Amounts) -> None:
        self.taken[0] += amount.cost_micro_usd
        self.taken[1] += amount.tokens
        self.taken[2] += amount.requests
        self.calls += 1

    def account(self, amount: Amounts, actual: Amounts, sign: int = 1) -> None:
        """A call's share is free again, and what it spent (nothing when released) is the block's;
        ``sign=-1`` undoes it."""
        self.taken[0] -= sign * amount.cost_micro_usd
        self.taken[1] -= sign * amount.tokens
        self.taken[2] -= sign * amount.requests
        self.spent[0] += sign * actual.cost_micro_usd
        self.spent[1] += sign * actual.tokens
        self.spent[2] += sign * actual.requests

    def take_back(self, amount: Amounts, actual: Amounts, sign: int = 1) -> None:
        """A call accounted for is committed on its own: out of the block's total and of what it holds
        (``sign=-1``: its commit failed, it is the block's again)."""
        for i, (its_share, its_spend) in enumerate(zip(attrs.astuple(amount), attrs.astuple(actual), strict=True)):
            self.spent[i] -= sign * its_spend
            self.held[i] -= sign * its_share

    def leave(self) -> bool:
        """A call is out; whether the block is now to settle."""
        self.calls -= 1
        return self._done()

    def close(self) -> bool:
        """No call enters any more; whether the block is now to settle."""
        self.closed, self.closed_at = True, time.monotonic()
        return self._done()

    def _done(self) -> bool:
        if self.closed and not self.calls and not self.settling:
            self.settling = True
            return True
        return False

    @property
    def total(self) -> Amounts:
        return Amounts(*self.spent)


@attrs.define
class Closing:
    """Blocks closed (under the lock): those to settle, and those to cut down to what they still need."""

    to_settle: list[Block] = attrs.Factory(list)
    to_cut: list[tuple[Block, Amounts]] = attrs.Factory(list)

    def add(self, block: Block) -> None:
        """Close ``block`` (if open), to settle or to cut."""
        if not block.closed and block.close():
            self.to_settle.append(block)
            return
        self.cut(block)

    def cut(self, block: Block) -> None:
        """Cut a closed block down when a quarter of the room it holds, in a limited dimension, is no
        longer needed (its calls in flight and its settled calls' spend): one closed when full has less
        than a call's room left, one closed by age (long calls) or by a report may hold 16 calls' room
        for one, and so may one closed full whose calls but a long one are over (``BudgetBlocks`` looks
        again a while after it closed). Never while a call of it is committed on its own: the two cuts
        would both count."""
        if block.settling or block.carving or not block.calls:
            return
        needs = [t + s for t, s in zip(block.taken, block.spent, strict=True)]
        limited = (block.limits.cost_micro_usd, block.limits.tokens, block.limits.requests)
        if any(limit is not None and held - need > held // 4
               for limit, held, need in zip(limited, block.held, needs, strict=True)):
            self.to_cut.append((block, Amounts(*needs)))

    def __bool__(self) -> bool:
        return bool(self.to_settle or self.to_cut)


def give_back(block: Block, amount: Amounts) -> bool:
    """A call's share returns unspent; whether the block is now to settle."""
    block.account(amount, Amounts())
    return block.leave()


def as_calls(state: BucketState, block: Block) -> BucketState:
    """``state`` with ``block`` counted as its calls: what they spent, what those in flight hold."""
    spent = [getattr(state.spent, d) + block.spent[i] for i, d in enumerate(DIMENSIONS)]
    reserved = [max(getattr(state.reserved, d) - block.held[i] + block.taken[i], 0) for i, d in enumerate(DIMENSIONS)]
    return BucketState(state.bucket, Amounts(*spent), Amounts(*reserved))
