"""A worker process for the cross-process tests: one ServiceManager, many concurrent calls.

``python worker.py JOB`` where JOB is JSON: ``settings`` (a settings document), ``calls``,
``operation`` ("chat" or "embed"), ``watch`` (check budget spend plus reservations after every
budget step) and ``idempotency_key`` (every chat repeats it). Once its manager is built it
prints ``ready`` and waits for a line on stdin (the test's barrier: every worker starts together);
then it prints one JSON line: outcomes by type, cached answers, and the budget peak it saw.
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys
import time
from collections.abc import Awaitable
from typing import Any

from provmw_redis.budgets import RedisBudgetStore

from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import parse_settings
from provmw.stores.budgets import BudgetStore

peak = 0


def watch_budget() -> None:
    """After every reserve and settle, read every bucket (one atomic snapshot) and keep the peak."""
    reserve, settle = RedisBudgetStore.reserve, RedisBudgetStore.settle

    async def check(store: BudgetStore) -> None:
        global peak
        for bucket in await store.states(now=time.time()):
            peak = max(peak, bucket.spent.cost_micro_usd + bucket.reserved.cost_micro_usd)

    async def watched_reserve(self: RedisBudgetStore, *args: Any, **kwargs: Any) -> Any:
        refusal = await reserve(self, *args, **kwargs)
        await check(self)
        return refusal

    async def watched_settle(self: RedisBudgetStore, *args: Any, **kwargs: Any) -> None:
        await settle(self, *args, **kwargs)
        await check(self)

    RedisBudgetStore.reserve = watched_reserve  # type: ignore[method-assign]
    RedisBudgetStore.settle = watched_settle  # type: ignore[method-assign]


async def main(job: dict[str, Any]) -> dict[str, Any]:
    if job.get("watch"):
        watch_budget()
    settings = parse_settings(job["settings"], "<worker>", {})
    host = PluginHost(PluginPolicy(allow=("redis",)), environ={})
    outcomes: collections.Counter[str] = collections.Counter()
    cached = 0
    async with ServiceManager(settings, host=host) as manager:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # every worker is ready: the test says go
        calls: list[Awaitable[Any]]
        if job["operation"] == "embed":
            calls = [manager.embed("the same words, everywhere") for _ in range(job["calls"])]
        elif job.get("idempotency_key"):
            calls = [manager.chat("hello", idempotency_key=job["idempotency_key"]) for _ in range(job["calls"])]
        else:
            calls = [manager.chat("hello", user=f"u{i}") for i in range(job["calls"])]
        for outcome in await asyncio.gather(*calls, return_exceptions=True):
            outcomes[type(outcome).__name__] += 1
            cached += bool(getattr(outcome, "cached", False))
    return {"outcomes": dict(outcomes), "cached": cached, "peak": peak}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))), flush=True)
