"""The memory ledger refuses a count no durable ledger could store, naming the record and the field."""

from __future__ import annotations

import pytest

from provmw.stores.usage import MemoryUsageStore
from tests.stores.test_usage_store import record


@pytest.mark.parametrize("field", ["input_tokens", "output_tokens"])
async def test_a_count_past_64_bits_is_refused_naming_the_record_and_field(field: str) -> None:
    store = MemoryUsageStore()
    with pytest.raises(OverflowError) as refused:
        await store.write([record("c7"), record("c7", attempt=2, **{field: 2**63})])
    assert str(refused.value) == (f"usage record ('c7', 2): {field}=9223372036854775808 does not fit the "
                                  "64-bit integer every durable ledger stores")
    assert await store.records() == []  # all or nothing, as a durable ledger's batch
