"""A Redis of the test's own, killed and restarted on the same port, while callers retry every refusal at once.

A refused call must let the event loop run, and the probe that finds Redis back must run on the
call path and reach the restarted server (not a connection to the dead one), so callers get
through one probe interval after Redis is back however hard they spin.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from provmw_redis import RedisState
from provmw_redis.backend import Health
from test_redis_processes import document, manager

from provmw.errors import BudgetUnavailableError
from provmw.manager import ServiceManager
from provmw.testing import FakeProvider

BUDGET = {"limits": [{"scope": "global", "period": "day", "max_cost_usd": 1000.0}]}
CALLERS = 16
RETRY_S = 10.0
GIVE_UP = 5_000  # refusals per caller: far more than one probe interval takes, and the test ends if it never does


class OwnRedis:
    """A ``redis-server`` on a free loopback port, without persistence, that the test kills and restarts."""

    def __init__(self, folder: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.folder, self.url = folder, f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.folder)], stdout=subprocess.DEVNULL)
        self.admin = redis.Redis(port=self.port, socket_connect_timeout=1.0)
        for _ in range(500):  # until it answers, polled with a bound
            try:
                self.admin.ping()  # connected now: a paused server still takes its CLIENT UNPAUSE
                return
            except redis.ConnectionError:
                self.process.poll()
                assert self.process.returncode is None, "redis-server exited"
        pytest.fail(f"redis-server on port {self.port} never answered")

    def pause(self, ms: int) -> None:
        """Every command that may write (the budget's scripts) waits, at most ``ms``, as on a stalled server."""
        self.admin.client_pause(ms, all=False)

    def unpause(self) -> None:
        self.admin.client_unpause()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    if shutil.which("redis-server") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no redis-server on PATH; CI must run the Redis restart tests")
        pytest.skip("no redis-server on PATH")
    server = OwnRedis(tmp_path)
    server.start()
    yield server
    server.kill()


class Outage:
    """The outage rule's clock, moved only by :meth:`end`; and how often callers were refused."""

    def __init__(self) -> None:
        self.now, self.refusals, self.noticed = 0.0, 0, asyncio.Event()

    def clock(self) -> float:
        return self.now

    def refused(self) -> None:
        self.refusals += 1
        if self.refusals == 4 * CALLERS:
            self.noticed.set()

    async def end(self, server: OwnRedis) -> None:
        """Once callers have been refused a while, bring Redis back and let one probe interval pass:
        a task of the callers' own process, as the store's connections and timers are."""
        await self.noticed.wait()
        server.start()
        self.now += RETRY_S


async def caller(m: ServiceManager, outage: Outage) -> bool:
    """Call until served, retrying every refusal at once; False after ``GIVE_UP`` refusals."""
    for _ in range(GIVE_UP):
        try:
            await m.chat("hello")
            return True
        except BudgetUnavailableError:
            outage.refused()
    return False


@pytest.mark.redis
async def test_callers_that_retry_every_refusal_get_through_one_probe_interval_after_redis_is_back(
        fake: FakeProvider, own_redis: OwnRedis) -> None:
    settings = document(fake, "restart", budget=BUDGET)
    settings["state"].update(url=own_redis.url, retry_s=RETRY_S)
    outage = Outage()
    async with manager(settings) as m:
        backend = m.state.shared
        assert isinstance(backend, RedisState)
        backend.health = Health(RETRY_S, clock=outage.clock)
        await asyncio.gather(*(m.chat("hello") for _ in range(2 * CALLERS)))  # a pool of connections
        own_redis.kill()
        ending = asyncio.create_task(outage.end(own_redis))
        served = await asyncio.gather(*(caller(m, outage) for _ in range(CALLERS)))
        ending.cancel()
    assert served == [True] * CALLERS


@pytest.mark.redis
async def test_a_paused_redis_is_probed_by_one_call_while_the_others_are_refused_at_once(
        fake: FakeProvider, own_redis: OwnRedis) -> None:
    settings = document(fake, "paused", budget=BUDGET)
    settings["state"].update(url=own_redis.url, retry_s=RETRY_S, timeout_s=0.2)
    outage = Outage()
    async with manager(settings) as m:
        backend = m.state.shared
        assert isinstance(backend, RedisState)
        backend.health = Health(RETRY_S, clock=outage.clock)
        await m.chat("hello")
        own_redis.pause(5000)
        with pytest.raises(BudgetUnavailableError):
            await m.chat("hello")  # waits out timeout_s: the outage starts
        outage.now += RETRY_S
        refused = await asyncio.gather(*(m.chat("hello") for _ in range(CALLERS)), return_exceptions=True)
        own_redis.unpause()
    assert all(isinstance(r, BudgetUnavailableError) for r in refused)
    assert sum("unreachable lately" not in str(r) for r in refused) == 1  # one probe waited out timeout_s
