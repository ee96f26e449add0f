"""One deployment of four answering 503, over real HTTP: retries move to the others, only its
breaker opens, and the ledger holds every attempt under the deployment it went to (ADR 0051)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from provmw.errors import CircuitOpenError
from provmw.manager import ServiceManager
from provmw.middleware._common import endpoint_key
from provmw.middleware.circuit_breaker import CircuitBreakerMiddleware
from provmw.middleware.pool import PoolMiddleware
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.stores.breakers import BreakerState, MemoryBreakerStore
from provmw.stores.pools import MemoryPoolState
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


class GuardedState(MemoryPoolState):
    """The embedded state, stopping a call that chooses over and over: a loop that never awaits
    anything that yields would block the event loop, and the test with it."""

    def __init__(self, most: int) -> None:
        super().__init__()
        self.most, self.starts = most, 0

    async def started(self, pool: str, member: str, *, key: str | None, tokens: int, now: float,
                      key_ttl_s: float) -> None:
        self.starts += 1
        if self.starts > self.most:
            raise RuntimeError(f"{self.starts} choices: the pool layer is choosing in a loop")
        await super().started(pool, member, key=key, tokens=tokens, now=now, key_ttl_s=key_ttl_s)


async def test_a_call_pinned_to_a_deployment_whose_breaker_is_open_is_refused(fake: FakeProvider,
                                                                              builtin_only: PluginHost) -> None:
    fake.fail_randomly(1.0, Fault(status=503), model="dep-a")
    breaker = {"circuit_breaker": {"min_calls": 1, "window_size": 1}, "pool": {"enabled": False}}
    settings = pooled(fake, "order", middleware=breaker)
    layer = PoolMiddleware(pools=settings.pools, configurations=settings.configurations, state=GuardedState(20))
    async with ServiceManager(settings, host=builtin_only, middleware=[layer]) as manager:
        await manager.chat("first")  # a fails once: its breaker opens, b serves
        with pytest.raises(CircuitOpenError):
            await manager.chat("pinned", controls={"deployment": "a"})
