"""Many processes, one Redis: budgets, leases, cache and breakers hold across process boundaries.

Workers (``worker.py``) are real processes with their own ServiceManager, calling the fake
provider that this test process serves over loopback HTTP.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from provmw_redis import RedisState

from provmw.errors import CircuitOpenError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import parse_settings
from provmw.stores.budgets import Amounts, BucketId, Charge, Limits
from provmw.testing import FakeProvider, Fault

from conftest import REDIS_URL, ROOT, spawn, state_settings

pytestmark = pytest.mark.redis

WORKER = str(Path(__file__).with_name("worker.py"))
DOLLAR = 1_000_000


def document(fake: FakeProvider, prefix: str, **middleware: dict[str, Any]) -> dict[str, Any]:
    """Settings for a priced fake model (worst case $0.0101 a call at max_tokens=100) on shared state."""
    return {
        "default": "main",
        "configurations": {"main": {
            "provider": "openai", "model": "gpt-test", "base_url": fake.openai_base_url,
            "options": {"max_tokens": 100, "temperature": 0},
            "price": {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 100.0}}},
        "middleware": {"usage": {"store": "memory"}, "retry": {"max_attempts": 1}, **middleware},
        "state": {"url": REDIS_URL, "key_prefix": prefix},
    }


DEPLOYMENTS = ("a", "b", "c", "d")


def pooled(fake: FakeProvider, prefix: str, strategy: str = "least_busy",
           **middleware: dict[str, Any]) -> dict[str, Any]:
    """Settings whose default is a pool of four equal deployments (models ``dep-a`` to ``dep-d`` on
    the fake provider) on shared state."""
    configurations = {d: {"provider": "openai", "model": f"dep-{d}", "base_url": fake.openai_base_url,
                          "price": {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0}} for d in DEPLOYMENTS}
    return {
        "default": "gpt",
        "configurations": configurations,
        "pools": {"gpt": {"members": list(DEPLOYMENTS), "strategy": strategy}},
        "middleware": {"usage": {"store": "memory"}, "retry": {"max_attempts": 1}, **middleware},
        "state": {"url": REDIS_URL, "key_prefix": prefix},
    }


async def run_workers(document: dict[str, Any], processes: int, calls: int, operation: str = "chat",
                      watch: bool = False, idempotency_key: str | None = None) -> list[dict[str, Any]]:
    # A loaded machine can take longer than the 0.5 s default to answer four busy processes.
    patient = {**document, "state": {**document["state"], "timeout_s": 5.0}}
    job = {"settings": patient, "calls": calls, "operation": operation, "watch": watch,
           "idempotency_key": idempotency_key}
    workers = [await asyncio.create_subprocess_exec(sys.executable, WORKER, json.dumps(job), cwd=ROOT,
                                                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
               for _ in range(processes)]
    await start_together(workers)
    results = []
    for worker in workers:
        out, _ = await worker.communicate()
        assert worker.returncode == 0
        results.append(json.loads(out))
    return results


async def start_together(workers: list[asyncio.subprocess.Process]) -> None:
    """The start barrier: once every worker has said ``ready``, tell them all to go."""
    for worker in workers:
        assert worker.stdout is not None and worker.stdin is not None
        assert await worker.stdout.readline() == b"ready\n", "a worker died before it was ready"
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write(b"go\n")
        await worker.stdin.drain()


def manager(document: dict[str, Any]) -> ServiceManager:
    return ServiceManager(parse_settings(document, "<test>", {}),
                          host=PluginHost(PluginPolicy(allow=("redis",)), environ={}))


def total(results: list[dict[str, Any]], outcome: str) -> int:
    return sum(r["outcomes"].get(outcome, 0) for r in results)


@pytest.mark.slow  # four processes: a multi-process scenario
async def test_four_processes_never_commit_or_reserve_past_a_strict_limit(fake: FakeProvider, prefix: str) -> None:
    fake.fail_randomly(1.0, Fault(delay_s=0.2))  # answers are slow, so reservations pile up
    budget = {"limits": [{"scope": "global", "period": "total", "max_cost_usd": 1.0}]}
    results = await run_workers(document(fake, prefix, budget=budget), processes=4, calls=250, watch=True)
    served, refused = total(results, "CompletionResponse"), total(results, "BudgetExceededError")
    assert served + refused == 1000
    assert refused > 0 and served >= 99  # $1.00 holds at least 99 worst cases of $0.0101
    assert max(r["peak"] for r in results) <= DOLLAR
    assert fake.count() == served  # a refused call sent nothing
    async with manager(document(fake, prefix, budget=budget)) as check:
        [bucket] = await check.state.budget_store().states(now=time.time())
        assert bucket.reserved == Amounts() and bucket.spent.requests == served


HOLDER = """
    import asyncio, sys, time
    from provmw.stores.budgets import Amounts, BucketId, Charge, Limits
    from provmw.stores.shared import StateSettings
    from provmw_redis import RedisState
    async def main():
        store = RedisState(StateSettings(sys.argv[1], options={"key_prefix": sys.argv[2]})).budget_store()
        charge = Charge(BucketId("global", "*", "total", "total"), Limits(cost_micro_usd=1_000_000),
                        Amounts(900_000, 0, 1))
        assert await store.reserve("held", [charge], now=time.time(), lease_s=float(sys.argv[3])) is None
        print("held", flush=True)
        await asyncio.sleep(60)
    asyncio.run(main())
"""


async def test_a_killed_holder_frees_its_reservation_within_the_lease(prefix: str) -> None:
    lease_s = 1.0
    holder = spawn(HOLDER, REDIS_URL, prefix, str(lease_s))
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    killed_at = time.time()
    state = RedisState(state_settings(prefix))
    store = state.budget_store()
    wanted = [Charge(BucketId("global", "*", "total", "total"), Limits(cost_micro_usd=DOLLAR), Amounts(900_000, 0, 1))]
    assert await store.reserve("mine", wanted, now=time.time(), lease_s=lease_s) is not None
    while await store.reserve("mine", wanted, now=time.time(), lease_s=lease_s) is not None:
        assert time.time() - killed_at <= lease_s + 1.0
        await asyncio.sleep(0.02)
    await state.aclose()


CACHED = {"cache": {"operations": ["embedding"]}}


async def test_an_entry_written_by_one_process_is_a_hit_in_another(fake: FakeProvider, prefix: str) -> None:
    settings = document(fake, prefix, **CACHED)
    [result] = await run_workers(settings, processes=1, calls=1, operation="embed")
    assert result["outcomes"] == {"EmbeddingResponse": 1} and result["cached"] == 0
    async with manager(settings) as mine:
        assert (await mine.embed("the same words, everywhere")).cached
    assert fake.count() == 1


@pytest.mark.slow  # four processes: a multi-process scenario
async def test_a_stampede_across_four_processes_makes_one_upstream_call(fake: FakeProvider, prefix: str) -> None:
    fake.fail_randomly(1.0, Fault(delay_s=0.5))
    results = await run_workers(document(fake, prefix, **CACHED), processes=4, calls=25, operation="embed")
    assert total(results, "EmbeddingResponse") == 100
    assert fake.count() == 1
    assert sum(r["cached"] for r in results) == 99


async def test_one_idempotency_key_across_four_processes_makes_one_request_and_one_charge(
        fake: FakeProvider, prefix: str) -> None:
    fake.fail_randomly(1.0, Fault(delay_s=0.3))
    budget = {"limits": [{"scope": "global", "period": "total", "max_cost_usd": 1.0}]}
    settings = document(fake, prefix, budget=budget)
    results = await run_workers(settings, processes=4, calls=5, idempotency_key="order-42")
    assert total(results, "CompletionResponse") == 20 and sum(r["cached"] for r in results) == 19
    assert fake.count() == 1
    async with manager(settings) as check:
        [bucket] = await check.state.budget_store().states(now=time.time())
    assert bucket.spent.requests == 1


BREAKER = {"circuit_breaker": {"window_size": 4, "min_calls": 4, "failure_rate": 0.5, "open_s": 1.0,
                               "half_open_probes": 3}}


async def test_failures_seen_by_one_process_open_the_breaker_for_all(fake: FakeProvider, prefix: str) -> None:
    fake.fail_randomly(1.0, Fault(status=503))
    [result] = await run_workers(document(fake, prefix, **BREAKER), processes=1, calls=4)
    assert result["outcomes"] == {"ProviderUnavailableError": 4}
    async with manager(document(fake, prefix, **BREAKER)) as mine:
        with pytest.raises(CircuitOpenError):
            await mine.chat("hello")
    assert fake.count() == 4


@pytest.mark.slow  # four processes: a multi-process scenario
async def test_a_half_open_breaker_lets_exactly_its_probes_through_across_processes(
        fake: FakeProvider, prefix: str) -> None:
    settings = document(fake, prefix, **BREAKER)
    fake.fail_randomly(1.0, Fault(status=503))
    await run_workers(settings, processes=1, calls=4)  # opens the breaker
    fake.reset()
    fake.fail_randomly(1.0, Fault(delay_s=1.0))  # healthy again, and slow: probes stay out together
    await asyncio.sleep(BREAKER["circuit_breaker"]["open_s"])  # the time under test: the breaker stays open this long
    results = await run_workers(settings, processes=4, calls=10)
    assert fake.count() == 3
    assert total(results, "CompletionResponse") == 3
    assert total(results, "CircuitOpenError") == 37


@pytest.mark.slow  # four processes start and make 800 calls: about 7 s
async def test_four_processes_on_one_pool_share_its_deployments_evenly(fake: FakeProvider, prefix: str) -> None:
    fake.fail_randomly(1.0, Fault(delay_s=0.05))  # slow enough that each process has hundreds in flight
    results = await run_workers(pooled(fake, prefix), processes=4, calls=200)
    assert total(results, "CompletionResponse") == 800
    served = collections.Counter(r.model for r in fake.received)
    assert max(served.values()) <= 0.3 * 800, served
    state = RedisState(state_settings(prefix))
    view = await state.pool_state().read("gpt", DEPLOYMENTS, None, time.time())
    await state.aclose()
    # Every process's calls went through Redis, and every one of them ended there.
    assert all(load.in_flight == 0 and load.latency_s is not None for load in view.loads.values())
