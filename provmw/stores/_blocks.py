"""A block of budget's bookkeeping (ADR 0035): what it holds in the file, what its calls in flight
hold of it and what its settled calls spent, per dimension; ``budget_blocks`` runs the blocks."""

from __future__ import annotations

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
    closed: bool = False
    settled: bool = False

    def fits(self, amount: Amounts) -> bool:
        limits, held, taken, spent = self.limits, self.held, self.taken, self.spent
        return ((limits.cost_micro_usd is None or taken[0] + spent[0] + amount.cost_micro_usd <= held[0])
                and (limits.tokens is None or taken[1] + spent[1] + amount.tokens <= held[1])
                and (limits.requests is None or taken[2] + spent[2] + amount.requests <= held[2]))

    def enter(self, amount: Amounts) -> None:
        self.taken[0] += amount.cost_micro_usd
        self.taken[1] += amount.tokens
        self.taken[2] += amount.requests
        self.calls += 1

    def account(self, amount: Amounts, actual: Amounts) -> None:
        """A call's share is free again, and what it spent (nothing when released) is the block's."""
        self.taken[0] -= amount.cost_micro_usd
        self.taken[1] -= amount.tokens
        self.taken[2] -= amount.requests
        self.spent[0] += actual.cost_micro_usd
        self.spent[1] += actual.tokens
        self.spent[2] += actual.requests

    def take_back(self, amount: Amounts, actual: Amounts) -> None:
        """A call accounted for is committed on its own: out of the block's total and of what it holds."""
        for i, (its_share, its_spend) in enumerate(zip(attrs.astuple(amount), attrs.astuple(actual), strict=True)):
            self.spent[i] -= its_spend
            self.held[i] = max(self.held[i] - its_share, 0)

    def leave(self) -> bool:
        """A call is out; whether the block is now to settle."""
        self.calls -= 1
        return self._done()

    def close(self) -> bool:
        """No call enters any more; whether the block is now to settle."""
        self.closed = True
        return self._done()

    def _done(self) -> bool:
        if self.closed and not self.calls and not self.settled:
            self.settled = True
            return True
        return False

    @property
    def total(self) -> Amounts:
        return Amounts(*self.spent)


@attrs.define
class Closing:
    """Blocks being closed (under the lock): those to settle, and those to cut down to what they need."""

    settle: list[Block] = attrs.Factory(list)
    cut: list[tuple[Block, Amounts]] = attrs.Factory(list)

    def add(self, block: Block) -> None:
        if block.closed:
            return
        if block.close():
            self.settle.append(block)
            return
        needs = [t + s for t, s in zip(block.taken, block.spent, strict=True)]
        # Closed when full, it has less room left than a call: not worth a transaction. Closed by age
        # (long calls) or by a report, it may hold many calls' room for one call.
        if any(held - need > held // 4 for held, need in zip(block.held, needs, strict=True)):
            self.cut.append((block, Amounts(*needs)))

    def __bool__(self) -> bool:
        return bool(self.settle or self.cut)


def give_back(block: Block, amount: Amounts) -> bool:
    """A call's share returns unspent; whether the block is now to settle."""
    block.account(amount, Amounts())
    return block.leave()


def as_calls(state: BucketState, block: Block) -> BucketState:
    """``state`` with ``block`` counted as its calls: what they spent, what those in flight hold."""
    spent = [getattr(state.spent, d) + block.spent[i] for i, d in enumerate(DIMENSIONS)]
    reserved = [max(getattr(state.reserved, d) - block.held[i] + block.taken[i], 0) for i, d in enumerate(DIMENSIONS)]
    return BucketState(state.bucket, Amounts(*spent), Amounts(*reserved))
