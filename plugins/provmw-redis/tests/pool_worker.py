"""A worker process for the fleet pool tests: one ServiceManager whose pool layer shares Redis and
reads a wall clock the test sets.

``python pool_worker.py JOB`` where JOB is JSON: ``settings`` (a settings document whose built-in
``pool`` layer is off), ``redis_url``, ``key_prefix`` and ``seed`` (the layer's random source). The
worker adds its own ``pool`` layer on ``RedisPoolState`` with a wall clock it does not advance
itself, prints ``ready``, then runs rounds: each line on stdin is JSON ``{"now": T, "calls": n,
"concurrency": c}``; it sets the wall clock to ``T``, makes ``n`` chats, ``c`` at a time, waits until
their starts and ends have landed in Redis (they are written behind the calls), and prints one
JSON line, ``{"served": [...]}``: per call, in order, the deployment that served it, or ``!`` and
the error's type. An empty line (or the end of stdin) ends it.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from typing import Any

from provmw_redis import RedisState

from provmw.manager import ServiceManager
from provmw.middleware.pool import PoolMiddleware
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import parse_settings
from provmw.stores.shared import StateSettings
from provmw.testing import FakeClock


async def round_of(manager: ServiceManager, calls: int, concurrency: int, name: str) -> list[str]:
    """``calls`` chats made ``concurrency`` at a time; who served each (or ``!`` and its error)."""
    served = [""] * calls
    numbers = iter(range(calls))

    async def caller() -> None:
        for i in numbers:
            try:
                served[i] = (await manager.chat(f"{name} question {i}")).served_by
            except Exception as exc:  # the test counts what reached the caller
                served[i] = f"!{type(exc).__name__}"

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return served


async def main(job: dict[str, Any]) -> None:
    settings = parse_settings(job["settings"], "<pool worker>", {})
    # Only the pools are shared; a loaded machine may take longer than the 0.5 s default to answer.
    shared = RedisState(StateSettings(job["redis_url"], shared=("pool",),
                                      options={"key_prefix": job["key_prefix"], "timeout_s": 5.0}))
    wall = FakeClock(0.0)
    pools = shared.pool_state()
    layer = PoolMiddleware(pools=settings.pools, configurations=settings.configurations, state=pools,
                           wall_clock=wall, rng=random.Random(job["seed"]))
    host = PluginHost(PluginPolicy(allow=("redis",)), environ={})
    try:
        async with ServiceManager(settings, host=host, middleware=[layer]) as manager:
            print("ready", flush=True)
            rounds = 0
            while line := (await asyncio.to_thread(sys.stdin.readline)).strip():
                order = json.loads(line)
                wall.now = float(order["now"])
                served = await round_of(manager, order["calls"], order["concurrency"], f"w{job['seed']}r{rounds}")
                await pools.flush()  # the round's starts and ends are in Redis before the next round reads
                print(json.dumps({"served": served}), flush=True)
                rounds += 1
    finally:
        await pools.aclose()  # writes what is on its way: the manager does not own this state
        await shared.aclose()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
