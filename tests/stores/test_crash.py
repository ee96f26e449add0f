"""Crashes: a process killed with SIGKILL loses no acknowledged record, no record of a call that
returned, and holds no budget."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from provmw.stores.budgets import Amounts, BucketId, Charge, Limits
from provmw.stores.budgets.sqlite import SqliteBudgetStore
from provmw.stores.usage import SqliteUsageStore
from provmw.stores.usage.journal import UsageJournal
from provmw.testing import FakeClock

BUCKET = BucketId("global", "*", "total", "total")
DOLLAR = Limits(cost_micro_usd=1_000_000)
LEASE_S = 1.0


def spawn(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args],
                            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])


HOLDER = """
    import asyncio, sys, time
    from provmw.stores.budgets import Amounts, BucketId, Charge, Limits
    from provmw.stores.budgets.sqlite import SqliteBudgetStore
    async def main():
        store = SqliteBudgetStore(sys.argv[1])
        charge = Charge(BucketId("global", "*", "total", "total"), Limits(cost_micro_usd=1_000_000),
                        Amounts(900_000, 0, 1))
        assert await store.reserve("held", [charge], now=time.time(), lease_s=float(sys.argv[2])) is None
        print("held", flush=True)
        await asyncio.sleep(60)
    asyncio.run(main())
"""


async def test_a_killed_holder_frees_its_reservation_within_the_lease(tmp_path: Path) -> None:
    started = time.time()
    holder = spawn(HOLDER, str(tmp_path / "b.db"), str(LEASE_S))
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    held_by = time.time()  # the holder reserved, by the host's clock, between ``started`` and now
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    clock = FakeClock(started)  # this store's clock, set to the bounds of the holder's lease: no waiting
    store = SqliteBudgetStore(tmp_path / "b.db", clock=clock)
    wanted = [Charge(BUCKET, DOLLAR, Amounts(900_000, 0, 1))]
    assert await store.reserve("mine", wanted, now=started, lease_s=LEASE_S) is not None  # still held
    clock.now = held_by + LEASE_S
    assert await store.reserve("mine", wanted, now=clock.now, lease_s=LEASE_S) is None  # free within the lease
    await store.aclose()


async def test_a_late_settle_from_a_survivor_counts_once(tmp_path: Path) -> None:
    clock = FakeClock(0.0)  # the store's: leases go by it (ADR 0044)
    store = SqliteBudgetStore(tmp_path / "b.db", clock=clock)
    await store.reserve("slow", [Charge(BUCKET, DOLLAR, Amounts(900_000, 0, 1))], now=0, lease_s=LEASE_S)
    clock.advance(2)
    await store.reserve("next", [Charge(BUCKET, DOLLAR, Amounts(900_000, 0, 1))], now=2, lease_s=LEASE_S)
    await store.settle("slow", Amounts(400_000, 0, 1))  # its lease ran out long ago
    await store.settle("slow", Amounts(400_000, 0, 1))
    [state] = await store.states(now=2)
    assert (state.spent.cost_micro_usd, state.reserved.cost_micro_usd) == (400_000, 900_000)
    await store.aclose()


WRITER = """
    import asyncio, sys, time
    from provmw.stores.usage import SqliteUsageStore, UsageRecord
    async def main():
        store = SqliteUsageStore(sys.argv[1])
        for i in range(1_000_000):
            batch = [UsageRecord(call_id=f"c{i}", correlation_id=f"c{i}", attempt=a, timestamp=time.time(),
                                 operation="chat", config_id="oa", provider="openai", model="m", input_tokens=i)
                     for a in (1, 2)]
            await store.write(batch)
            print(i, flush=True)  # acknowledged: committed to the WAL (NORMAL); a kill cannot undo it
    asyncio.run(main())
"""


def test_kill_9_during_writes_loses_no_acknowledged_record(tmp_path: Path) -> None:
    rng = random.Random(7)
    path = tmp_path / "ledger.db"
    for _ in range(5):
        writer = spawn(WRITER, str(path))
        assert writer.stdout is not None
        first = writer.stdout.readline()
        time.sleep(rng.uniform(0.05, 0.4))
        os.kill(writer.pid, signal.SIGKILL)
        acknowledged = [int(line) for line in (first + writer.stdout.read()).split()]
        writer.wait()
        connection = sqlite3.connect(path)
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        stored = {row[0] for row in connection.execute("SELECT correlation_id FROM usage")}
        connection.close()
        assert {f"c{i}" for i in acknowledged} <= stored


SERVER = """
    import asyncio, sys
    from provmw.manager import ServiceManager
    from provmw.plugins import PluginHost, PluginPolicy
    from provmw.settings import Settings
    from provmw.testing import FakeProvider
    from tests.conftest import anthropic_config
    async def call(manager, i):
        await manager.chat("hi", configuration="an", correlation_id=f"c{i}")
        print(f"c{i}", flush=True)  # the answer has returned to the caller
    async def main():
        async with FakeProvider() as fake:
            price = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0}
            settings = Settings(configurations={"an": anthropic_config(fake, price=price)}, default="an",
                                middleware={"usage": {"path": sys.argv[1]}})
            async with ServiceManager(settings, host=PluginHost(PluginPolicy(autoload=False), environ={})) as m:
                for start in range(0, 2_000, 16):
                    await asyncio.gather(*(call(m, i) for i in range(start, start + 16)))
    asyncio.run(main())
"""


async def ledger_after_restart(path: Path) -> set[str]:
    journal = UsageJournal(SqliteUsageStore(path))
    await journal.replay()  # what the next start does first
    found = {r.correlation_id for r in await journal.store.records()}
    await journal.aclose()
    return found


def test_kill_9_loses_no_record_of_a_call_that_returned(tmp_path: Path) -> None:
    rng = random.Random(11)
    path, returned = tmp_path / "ledger.db", set()
    for _ in range(3):
        server = spawn(SERVER, str(path))
        assert server.stdout is not None
        stop_after = rng.randint(100, 1_200)
        lines = [server.stdout.readline() for _ in range(stop_after)]
        os.kill(server.pid, signal.SIGKILL)
        returned |= {line.strip() for line in lines + server.stdout.readlines() if line.strip()}
        server.wait()
        assert returned <= asyncio.run(ledger_after_restart(path))
