"""What a budget store's buckets hold while concurrent calls run: the highest spent + reserved cost any
bucket reached, sampled until the calls are done (the promise: never above the limit)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

from provmw.stores.budgets import BudgetStore

T = TypeVar("T")


async def peak_cost_while(store: BudgetStore, calls: Awaitable[T], *, every_s: float = 0.001) -> tuple[T, int]:
    """``calls``' result, and the most micro-USD spent plus reserved in any bucket while they ran."""
    peak, done = 0, asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            for bucket in await store.states(now=time.time()):
                peak = max(peak, bucket.spent.cost_micro_usd + bucket.reserved.cost_micro_usd)
            await asyncio.sleep(every_s)

    sampler = asyncio.create_task(sample())
    try:
        result = await calls
    finally:
        done.set()
        await sampler
    return result, peak
