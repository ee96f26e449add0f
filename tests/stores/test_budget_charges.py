"""Two limits on one bucket make one charge, the tighter limit in each dimension; a lease ends at its instant."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from provmw.stores.budgets import Amounts, BucketId, Charge, Limits, MemoryBudgetStore, one_per_bucket

DAY = BucketId("user", "ada", "day", "2026-11-22")
limit = st.none() | st.integers(0, 10**6)


@given(first=st.tuples(limit, limit, limit), second=st.tuples(limit, limit, limit))
def test_two_limits_on_one_bucket_keep_the_tighter_in_each_dimension(
        first: tuple[int | None, int | None, int | None], second: tuple[int | None, int | None, int | None]) -> None:
    [merged] = one_per_bucket([Charge(DAY, Limits(*first), Amounts(5, 1, 1)),
                               Charge(DAY, Limits(*second), Amounts(3, 7, 1))])
    tighter = tuple(b if a is None else a if b is None else min(a, b) for a, b in zip(first, second, strict=True))
    assert merged == Charge(DAY, Limits(*tighter), Amounts(5, 7, 1))


async def test_a_lease_no_longer_counts_from_its_expiry_instant() -> None:
    store = MemoryBudgetStore()
    full = Charge(DAY, Limits(cost_micro_usd=1_000), Amounts(1_000, 0, 1))
    await store.reserve("r1", [full], now=0, lease_s=5)
    assert await store.reserve("r2", [full], now=5, lease_s=5) is None
