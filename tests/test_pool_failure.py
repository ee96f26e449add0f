"""One deployment of four answering 503, over real HTTP: retries move to the others, only its
breaker opens, and the ledger holds every attempt under the deployment it went to (ADR 0051)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from provmw.manager import ServiceManager
from provmw.middleware._common import endpoint_key
from provmw.middleware.circuit_breaker import CircuitBreakerMiddleware
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.stores.breakers import BreakerState, MemoryBreakerStore
from provmw.stores.usage import SqliteUsageStore, UsageRecord
from provmw.testing import FakeProvider, Fault
from tests.test_pools import MEMBERS, pooled

CALLS = 2_000


async def outcomes(manager: ServiceManager, calls: int, concurrency: int = 64) -> list[object]:
    gate = asyncio.Semaphore(concurrency)

    async def call(i: int) -> object:
        async with gate:
            return await manager.chat(f"question {i}")

    return await asyncio.gather(*(call(i) for i in range(calls)), return_exceptions=True)


def one_down(fake: FakeProvider, ledger: Path) -> Settings:
    fake.fail_randomly(1.0, Fault(status=503), model="dep-b")
    return pooled(fake, middleware={"usage": {"path": str(ledger)}})  # retry: at most 2 attempts


def breakers(manager: ServiceManager) -> dict[str, BreakerState]:
    [layer] = [m for m in manager.pipeline.middlewares if isinstance(m, CircuitBreakerMiddleware)]
    assert isinstance(layer.store, MemoryBreakerStore)
    return {m: layer.store.state(endpoint_key(manager.settings.configurations[m])) for m in MEMBERS}


async def records(path: Path) -> list[UsageRecord]:
    store = SqliteUsageStore(path)
    try:
        return await store.records()
    finally:
        await store.aclose()


async def test_with_one_of_four_down_under_a_thousandth_of_the_calls_fail(fake: FakeProvider,
                                                                          builtin_only: PluginHost,
                                                                          tmp_path: Path) -> None:
    async with ServiceManager(one_down(fake, tmp_path / "u.db"), host=builtin_only) as manager:
        found = await outcomes(manager, CALLS)
    failed = [o for o in found if isinstance(o, BaseException)]
    assert len(failed) < 0.001 * CALLS, failed[:3]


async def test_only_the_failing_deployments_breaker_opens(fake: FakeProvider, builtin_only: PluginHost,
                                                         tmp_path: Path) -> None:
    async with ServiceManager(one_down(fake, tmp_path / "u.db"), host=builtin_only) as manager:
        await outcomes(manager, 400)
        states = breakers(manager)
    assert states == {"a": BreakerState.CLOSED, "b": BreakerState.OPEN, "c": BreakerState.CLOSED,
                      "d": BreakerState.CLOSED}


async def test_the_ledger_holds_one_record_per_attempt_under_its_deployment(fake: FakeProvider,
                                                                            builtin_only: PluginHost,
                                                                            tmp_path: Path) -> None:
    async with ServiceManager(one_down(fake, tmp_path / "u.db"), host=builtin_only) as manager:
        await outcomes(manager, 400)
    found = await records(tmp_path / "u.db")
    assert {m: sum(r.config_id == m for r in found) for m in MEMBERS} == \
        {m: fake.count(model=f"dep-{m}") for m in MEMBERS}
    assert all(r.model == f"dep-{r.config_id}" for r in found)
    assert {r.config_id for r in found if r.status == "error"} == {"b"}
    assert sum(r.status == "ok" for r in found) == 400
