"""A host of the fleet tests: one ServiceManager whose ledger is in PostgreSQL, many calls.

``python fleet_worker.py JOB`` where JOB is JSON: ``settings`` (a settings document),
``calls`` (how many; 0 means until killed) and ``concurrency``. Once its manager is built it
prints ``ready`` and waits for a line on stdin (the test's barrier: every host starts together).
Each call's correlation id is printed once the call has returned (answered or failed); a last
line ``done`` follows a clean exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
import uuid
from typing import Any

import provmw_postgres

from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import parse_settings


def host() -> PluginHost:
    plugins = PluginHost(PluginPolicy(autoload=False), environ={})
    plugins.register(provmw_postgres, "postgres")
    return plugins


async def caller(manager: ServiceManager, numbers: itertools.count[int], calls: int) -> None:
    while calls == 0 or next(numbers) < calls:
        correlation_id = uuid.uuid4().hex
        with contextlib.suppress(Exception):  # a call that failed has returned too, with its records
            await manager.chat("hello fleet", correlation_id=correlation_id)
        print(correlation_id, flush=True)


async def main(job: dict[str, Any]) -> None:
    settings = parse_settings(job["settings"], "<worker>", {})
    async with ServiceManager(settings, host=host()) as manager:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # every host is ready: the test says go
        numbers = itertools.count()
        await asyncio.gather(*(caller(manager, numbers, job["calls"]) for _ in range(job["concurrency"])))
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
