"""What an error status bills, and what the budget's grace keeps at its very edge."""

from __future__ import annotations

import pytest

from provmw.errors import ProviderError
from provmw.stores.budgets import KEEP_EXPIRED_S, Amounts, BucketId, Charge, Limits, MemoryBudgetStore
from provmw.stores.usage import billed_for


@pytest.mark.parametrize(("status", "billed"), [(400, "no"), (399, "unknown"), (None, "unknown")])
def test_an_error_status_from_400_up_was_not_billed(status: int | None, billed: str) -> None:
    assert billed_for(ProviderError("answered", status=status)) == billed


async def test_a_reservation_is_settleable_up_to_the_last_instant_of_its_grace() -> None:
    store, day = MemoryBudgetStore(), BucketId("user", "ada", "day", "2026-11-22")
    await store.reserve("r1", [Charge(day, Limits(), Amounts(900, 0, 1))], now=0, lease_s=5)
    await store.reserve("r2", [Charge(day, Limits(), Amounts(1, 0, 1))], now=5 + KEEP_EXPIRED_S, lease_s=5)
    await store.settle("r1", Amounts(300, 0, 1))
    [state] = await store.states(now=5 + KEEP_EXPIRED_S)
    assert state.spent.cost_micro_usd == 300
