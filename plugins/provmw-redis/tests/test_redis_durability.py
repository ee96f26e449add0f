"""A budget on Redis needs persistence: the store warns when it first reaches a server that would
forget the spend on restart, and ``provmw check`` lists it; settles that fail while Redis is down
are kept and written once it is back. Each test runs a ``redis-server`` of its own."""

from __future__ import annotations

import io
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from own_server import FORGETFUL, PERSISTENT, OwnServer
from provmw_redis import RedisState

from provmw.cli import main
from provmw.stores.budgets import Amounts, BudgetStore
from provmw.stores.outage import GuardedBudgets
from provmw.stores.shared import StateSettings
from tests.stores.test_budget_store import charge, held


@pytest.fixture(params=[PERSISTENT, FORGETFUL], ids=["persistent", "forgetful"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OwnServer]:
    own = OwnServer(tmp_path, request.param)
    own.start()
    yield own
    own.kill()


@pytest.fixture
def persistent(tmp_path: Path) -> Iterator[OwnServer]:
    own = OwnServer(tmp_path, PERSISTENT)
    own.start()
    yield own
    own.kill()


def backend(server: OwnServer) -> RedisState:
    return RedisState(StateSettings(server.url, shared=["budget"], options={"key_prefix": "own", "retry_s": 0}))


@pytest.fixture
async def state(server: OwnServer) -> AsyncIterator[RedisState]:
    made = backend(server)
    yield made
    await made.aclose()


def forgetful(server: OwnServer) -> bool:
    return server.persistence == FORGETFUL


async def test_the_store_warns_when_redis_would_forget_the_spend(state: RedisState, server: OwnServer,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "provmw_redis")
    await state.budget_store().reserve("r1", [charge(1_000)], now=0, lease_s=60)
    warned = [r.getMessage() for r in caplog.records if "a restart of Redis forgets" in r.getMessage()]
    assert len(warned) == (1 if forgetful(server) else 0)


async def test_spend_survives_a_restart_only_with_persistence(state: RedisState, server: OwnServer) -> None:
    store = state.budget_store()
    await store.reserve("r1", [charge(1_000)], now=0, lease_s=60)
    await store.settle("r1", Amounts(400, 5, 1))
    server.kill()
    server.start()
    reader = backend(server)  # another process, once Redis is back
    assert await spent(reader.budget_store()) == (0 if forgetful(server) else 400)
    await reader.aclose()


async def test_a_settle_failing_while_redis_is_down_counts_once_it_is_back(persistent: OwnServer) -> None:
    state = backend(persistent)
    store = GuardedBudgets(state.budget_store())
    await store.reserve("r1", [charge(1_000)], now=0, lease_s=60)
    persistent.kill()
    await store.settle("r1", Amounts(400, 5, 1))  # refused: nobody listens
    persistent.start()
    assert await held(store) == (400, 0)
    await state.aclose()


def check_budget_on(url: str, folder: Path) -> tuple[int, str]:
    """``provmw check`` of settings keeping a budget in the Redis at ``url``: its status and output."""
    path = folder / "provmw.toml"
    path.write_text(f'[configurations.a]\nprovider = "openai"\nmodel = "m"\n\n[middleware.budget]\n'
                    f'limits = [{{ scope = "global", period = "day", max_requests = 20 }}]\n\n'
                    f'[state]\nurl = "{url}"\nshared = ["budget"]\nkey_prefix = "check"\n')
    out = io.StringIO()
    return main(["--config", str(path), "check"], out), out.getvalue()


def test_provmw_check_lists_a_budget_on_a_redis_that_would_forget_it(server: OwnServer, tmp_path: Path) -> None:
    status, printed = check_budget_on(server.url, tmp_path)
    assert (status, "appendonly is no and no save rule" in printed) == \
        ((1, True) if forgetful(server) else (0, False)), printed

async def spent(store: BudgetStore) -> int:
    return sum(state.spent.cost_micro_usd for state in await store.states(now=0))


@pytest.mark.parametrize(("policy", "listed"), [("allkeys-lru", True), ("volatile-ttl", True), ("noeviction", False)])
def test_provmw_check_lists_a_budget_on_a_redis_that_may_evict_it(tmp_path: Path, policy: str, listed: bool) -> None:
    own = OwnServer(tmp_path, (*PERSISTENT, "--maxmemory", "64mb", "--maxmemory-policy", policy))
    own.start()
    try:
        status, printed = check_budget_on(own.url, tmp_path)
    finally:
        own.kill()
    assert (status, f"maxmemory-policy is {policy}" in printed) == ((1, True) if listed else (0, False))
