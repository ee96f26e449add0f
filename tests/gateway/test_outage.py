"""The gateway through a shared-state outage (issue 38): Redis, a server of this test's own, killed for
30 s under steady load, then started again on the same port.

Under the outage rule (ADR 0013, ADR 0056) a key with a budget is refused 503 before any request
(the budget fails closed), a key without one is served; /health stays live, /health/ready says
degraded and stays 200; once Redis is back the gateway is ready again and counts budgets in Redis
without a restart; and the ledger holds a row for every request the provider received. Beside it,
/metrics reads a breaker's state from the same Redis.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import shutil
import socket
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest
import redis

from provmw.ci import service_missing
from provmw.testing import FakeProvider, Fault
from tests.gateway.test_health import BREAKER, CHAT, Served, chat, document, metrics, served

OUTAGE_S = 30.0  # the figure: the test's one long wait
CALLERS = 16
WARM_UP_CALLS = 200  # answered before Redis is killed
RECOVERED_CALLS = 200  # budgeted calls served in a row once readiness says ready again
BOUND_S = 20.0  # how long a state change may take before the test gives up (a bound, not a timing assertion)
REQUEST_TIMEOUT_S = 10.0  # a request unanswered this long hangs

pytestmark = pytest.mark.slow


class OwnRedis:
    """``redis-server`` on a free loopback port, killed (-9) and restarted on the same port: never the
    shared server. It persists every write (as a budget on Redis needs: ``provmw check`` says so), so
    the spend before the kill is still there after the restart."""

    def __init__(self, folder: Path) -> None:
        if shutil.which("redis-server") is None:
            service_missing("no redis-server on PATH for the gateway's outage test")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.folder, self.url = folder, f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                         "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                                         "--dir", str(self.folder)],
                                        stdout=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=1.0)
        deadline = time.monotonic() + BOUND_S
        while time.monotonic() < deadline:  # until it answers, polled with a bound
            try:
                client.ping()
                client.close()
                return
            except redis.ConnectionError:
                assert self.process.poll() is None, "redis-server exited"
            time.sleep(0.01)
        pytest.fail(f"redis-server on port {self.port} never answered")

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


@pytest.fixture
def own_redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[OwnRedis]:
    monkeypatch.setenv("PROVMW_CACHE_SIGNING_KEY", "a-signing-secret-for-the-outage-test")  # the shared cache's
    server = OwnRedis(tmp_path)
    server.start()
    yield server
    server.kill()


@attrs.define
class Load:
    """Steady load from ``CALLERS`` tasks, each request noted with the phase it started in."""

    gw: Served
    budgeted: frozenset[str]  # the whole keys that have a budget
    keys: tuple[str, ...]
    phase: str = "before"
    outcomes: collections.Counter[tuple[str, bool, int]] = attrs.field(factory=collections.Counter)
    slowest_s: dict[str, float] = attrs.field(factory=dict)
    hung: int = 0
    streak: int = 0  # budgeted calls served in a row
    stop: bool = False

    def served(self, phase: str, budgeted: bool) -> int:
        return self.outcomes[phase, budgeted, 200]

    async def caller(self, session: aiohttp.ClientSession, key: str) -> None:
        headers = {"authorization": f"Bearer {key}"}
        while not self.stop:
            phase, started = self.phase, time.monotonic()
            try:
                async with session.post(f"{self.gw.url}/v1/chat/completions", json=CHAT, headers=headers) as answer:
                    body = await answer.json()
            except TimeoutError:
                self.hung += 1
                continue
            if answer.status != 200:
                assert body["error"]["code"] == "service_unavailable", body
            self.outcomes[phase, key in self.budgeted, answer.status] += 1
            if key in self.budgeted:
                self.streak = self.streak + 1 if answer.status == 200 else 0
            self.slowest_s[phase] = max(self.slowest_s.get(phase, 0.0), time.monotonic() - started)


@attrs.define
class Probes:
    """/health and /health/ready polled all along: what each answered, by phase."""

    url: str
    live: collections.Counter[int] = attrs.field(factory=collections.Counter)
    ready: collections.Counter[tuple[str, int, str]] = attrs.field(factory=collections.Counter)
    last: str = ""

    async def poll(self, session: aiohttp.ClientSession, load: Load) -> None:
        while not load.stop:
            async with session.get(f"{self.url}/health") as live:
                self.live[live.status] += 1
            async with session.get(f"{self.url}/health/ready") as ready:
                self.last = (await ready.json())["status"]
                self.ready[load.phase, ready.status, self.last] += 1
            await asyncio.sleep(0.05)  # pacing the probe, as a load balancer's interval does

    async def until(self, status: str) -> float:
        """Seconds until readiness said ``status`` (at most ``BOUND_S``)."""
        started = time.monotonic()
        while self.last != status:
            assert time.monotonic() - started < BOUND_S, f"readiness never said {status!r}"
            await asyncio.sleep(0.05)
        return time.monotonic() - started


async def until(condition: Any) -> None:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < BOUND_S, "the load never got there"
        await asyncio.sleep(0.05)


async def keys_for(gw: Served) -> tuple[tuple[str, ...], frozenset[str]]:
    """Four keys: two without a budget (the gateway's own, and one of team "support"), two with one
    (of teams "search" and "ads", "search" with a budget of its own too)."""
    spare, _ = await gw.keys.create("acme", team="support")
    budgeted = []
    for team in ("search", "ads"):
        whole, record = await gw.keys.create("acme", team=team)
        await gw.keys.set_budget("key", record.key_id, "day", max_requests=1_000_000, max_cost_usd=1000.0)
        budgeted.append(whole)
    await gw.keys.set_budget("team", "acme/search", "day", max_requests=1_000_000)
    return (gw.key, spare, *budgeted), frozenset(budgeted)


def ledger_rows(folder: Path) -> int:
    with contextlib.closing(sqlite3.connect(folder / "ledger.sqlite3")) as db:
        return int(db.execute("SELECT count(*) FROM usage").fetchone()[0])


async def outage(gw: Served, own_redis: OwnRedis, load: Load, probes: Probes) -> tuple[float, float]:
    """Warm up, kill Redis for ``OUTAGE_S``, start it again, load until budgeted calls are served in a row:
    seconds until readiness said degraded after the kill, and ready after the restart."""
    await until(lambda: load.served("before", True) >= WARM_UP_CALLS)
    own_redis.kill()
    load.phase, killed = "outage", time.monotonic()
    degraded_after_s = await probes.until("degraded")
    await asyncio.sleep(OUTAGE_S - (time.monotonic() - killed))  # the outage itself: the test's one long wait
    await asyncio.to_thread(own_redis.start)  # the loop keeps serving meanwhile
    load.phase = "restarted"
    ready_after_s = await probes.until("ready")
    load.phase, load.streak = "recovered", 0
    await until(lambda: load.streak >= RECOVERED_CALLS)
    return degraded_after_s, ready_after_s


async def test_the_gateway_serves_through_a_redis_outage_and_recovers_without_a_restart(
        fake: FakeProvider, tmp_path: Path, own_redis: OwnRedis) -> None:
    async with served({**document(fake, tmp_path), "state": {"url": own_redis.url}}, tmp_path) as gw:
        keys, budgeted = await keys_for(gw)
        load, probes = Load(gw, budgeted, keys), Probes(gw.url)
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
            tasks = [asyncio.create_task(load.caller(session, keys[i % len(keys)])) for i in range(CALLERS)]
            tasks.append(asyncio.create_task(probes.poll(session, load)))
            try:
                degraded_after_s, ready_after_s = await outage(gw, own_redis, load, probes)
            finally:
                load.stop = True
                await asyncio.gather(*tasks)
        buckets = await gw.manager.state.budget_store().states(now=time.time())
    report(load, probes, degraded_after_s, ready_after_s, ledger_rows(tmp_path), fake.count())
    # Answered or refused as the outage rule says, never hanging; health live all along, ready degraded.
    assert load.hung == 0
    assert {status for (_, _, status) in load.outcomes} <= {200, 503}
    assert not any(status == 503 and not budget for (_, budget, status) in load.outcomes)
    assert load.outcomes["outage", True, 503] > 0 and load.served("outage", False) > 0
    assert set(probes.live) == {200}
    assert {status for (_, status, _) in probes.ready} == {200}
    assert probes.ready["outage", 200, "degraded"] > 0
    # Back without a restart (``outage`` waited for budgeted calls served in a row), counted in Redis.
    served_budgeted = sum(n for (_, budget, status), n in load.outcomes.items() if budget and status == 200)
    assert sum(b.spent.requests for b in buckets if b.bucket.scope == "key") == served_budgeted
    # No ledger record lost: a row for every request the provider received (read once the gateway closed).
    assert ledger_rows(tmp_path) == fake.count()


async def test_metrics_show_a_breaker_that_redis_keeps(fake: FakeProvider, tmp_path: Path,
                                                      own_redis: OwnRedis) -> None:
    fake.fail_randomly(1.0, Fault(status=503))
    settings = {**document(fake, tmp_path, **BREAKER), "state": {"url": own_redis.url}}
    async with served(settings, tmp_path) as gw, aiohttp.ClientSession() as session:
        assert [await chat(session, gw) for _ in range(3)] == [503] * 3
        text = await metrics(session, gw)
    assert 'provmw_gateway_breaker_state{configuration="chat",state="open"} 1' in text


def report(load: Load, probes: Probes, degraded_after_s: float, ready_after_s: float, rows: int,
           upstream: int) -> None:
    print(f"\noutage figures: {dict(sorted(load.outcomes.items()))}")
    print(f"slowest answer by phase (s): { {k: round(v, 3) for k, v in load.slowest_s.items()} }")
    print(f"readiness: degraded {degraded_after_s:.2f}s after the kill, ready {ready_after_s:.2f}s after the "
          f"restart; polls {dict(probes.ready)}; /health {dict(probes.live)}")
    print(f"ledger rows {rows}, upstream requests {upstream}, hung {load.hung}")
