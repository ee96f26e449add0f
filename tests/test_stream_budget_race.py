"""A thousand concurrent streams against one strict $1.00 bucket, over real HTTP."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from provmw.errors import BudgetExceededError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.responses import ChatChunk
from provmw.settings import Settings
from provmw.stores.usage import SqliteUsageStore
from provmw.testing import FakeProvider
from tests.budget_sampling import peak_cost_while
from tests.conftest import openai_config

LIMIT_MICRO_USD = 1_000_000
PRICE = {"input_usd_per_mtok": 100.0, "output_usd_per_mtok": 1000.0, "max_output_tokens": 1000}


def settings(fake: FakeProvider, path: Path) -> Settings:
    return Settings(configurations={"oa": openai_config(fake, price=PRICE, options={"max_tokens": 10})},
                    middleware={"budget": {"path": str(path), "limits": [
                        {"scope": "global", "period": "total", "max_cost_usd": 1.0}]},
                        "usage": {"path": str(path)}})


async def stream(manager: ServiceManager, i: int) -> list[ChatChunk] | BudgetExceededError:
    try:
        return [c async for c in manager.stream_chat(f"stream call {i}")]
    except BudgetExceededError as exc:
        return exc


async def test_concurrent_streams_never_commit_or_reserve_past_a_strict_limit(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    async with ServiceManager(settings(fake, tmp_path / "ledger.sqlite3"), host=builtin_only) as manager:
        store = manager.state.budget_store()
        outcomes, peak = await peak_cost_while(store, asyncio.gather(*(stream(manager, i) for i in range(1000))))
        [bucket] = await store.states(now=time.time())
    served = [o for o in outcomes if isinstance(o, list)]
    assert len(served) + sum(isinstance(o, BudgetExceededError) for o in outcomes) == 1000
    assert len(served) >= 50 and peak <= LIMIT_MICRO_USD  # the rest refused at once, never waiting
    reported = sum(chunks[-1].usage.cost_usd or 0 for chunks in served if chunks[-1].usage is not None)
    ledger = SqliteUsageStore(tmp_path / "ledger.sqlite3")
    records = await ledger.records()
    await ledger.aclose()
    assert len(records) == len(served) == fake.count()
    assert round(sum(r.cost_usd or 0 for r in records), 9) == round(reported, 9)
    assert bucket.spent.cost_micro_usd == round(reported * 1e6) and bucket.reserved.cost_micro_usd == 0
