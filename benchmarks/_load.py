"""A load generator in a process of its own: ``python -m benchmarks._load PLAN.json``.

The plan (JSON) names a base ``url``, the ``concurrency`` (connections, each one client calling
in a loop), ``warmup_s`` and ``duration_s``, ``report_s`` and the ``requests`` to cycle through:
each a ``path``, a JSON ``body``, the bearer ``key``, the statuses it may ``expect`` (default
``[200]``) and a ``weight`` (how many turns of the cycle it takes). Every ``report_s`` of the
measured window it prints one JSON line of that interval (``"kind": "interval"``); at the end
one of the whole window (``"kind": "total"``): requests, requests a second, the count of each
status, errors (an unexpected status, a stream without its ``[DONE]``, a failed connection) and
the p50/p99 latency. Requests that start during the warm-up are left out of all but ``sent``,
the count of every request made.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

__all__ = ["Window", "run"]


class Window:
    """What the requests that started in one stretch of time came to."""

    def __init__(self) -> None:
        self.latencies_s: list[float] = []
        self.statuses: collections.Counter[str] = collections.Counter()
        self.errors: collections.Counter[str] = collections.Counter()

    def add(self, latency_s: float, status: str, error: str | None) -> None:
        self.latencies_s.append(latency_s)
        self.statuses[status] += 1
        if error is not None:
            self.errors[error] += 1

    def summary(self, kind: str, seconds: float) -> dict[str, Any]:
        ordered = sorted(self.latencies_s) or [0.0]
        return {"kind": kind, "seconds": seconds, "requests": len(self.latencies_s),
                "requests_per_s": len(self.latencies_s) / seconds, "statuses": dict(self.statuses),
                "errors": sum(self.errors.values()), "error_kinds": dict(self.errors),
                "p50_ms": statistics.median(ordered) * 1000, "p99_ms": ordered[int(len(ordered) * 0.99)] * 1000}


async def _call(session: aiohttp.ClientSession, url: str, request: dict[str, Any]) -> tuple[str, str | None]:
    """One request: its status, and what was wrong with it (None: nothing)."""
    try:
        async with session.post(url + request["path"], json=request["body"],
                                headers={"authorization": f"Bearer {request['key']}"}) as response:
            body = await response.read()
    except (TimeoutError, aiohttp.ClientError) as exc:
        return "failed", type(exc).__name__
    if response.status not in request.get("expect", [200]):
        return str(response.status), f"unexpected {response.status}: {body[:120]!r}"
    if response.status == 200 and request["body"].get("stream") and b"[DONE]" not in body:
        return "200", "stream without [DONE]"
    return str(response.status), None


async def run(plan: dict[str, Any]) -> dict[str, Any]:
    """Load ``plan["url"]`` as the plan says, printing each interval; the whole window's summary."""
    schedule: Iterator[dict[str, Any]] = itertools.cycle(
        [request for request in plan["requests"] for _ in range(request.get("weight", 1))])
    started = time.perf_counter()
    measured_from = started + plan["warmup_s"]
    until = measured_from + plan["duration_s"]
    total, interval = Window(), Window()
    sent = 0
    connector = aiohttp.TCPConnector(limit=plan["concurrency"])
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def client() -> None:
            nonlocal sent
            while (began := time.perf_counter()) < until:
                sent += 1
                status, error = await _call(session, plan["url"], next(schedule))
                if began >= measured_from:
                    for window in (total, interval):
                        window.add(time.perf_counter() - began, status, error)

        async def reporter() -> None:
            await asyncio.sleep(max(measured_from - time.perf_counter(), 0))
            nonlocal interval
            last = time.perf_counter()
            while last < until:
                await asyncio.sleep(min(plan["report_s"], until - last))
                done, interval, now = interval, Window(), time.perf_counter()
                print(json.dumps(done.summary("interval", now - last)), flush=True)
                last = now

        await asyncio.gather(reporter(), *(client() for _ in range(plan["concurrency"])))
    return {**total.summary("total", plan["duration_s"]), "sent": sent}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(json.loads(Path(sys.argv[1]).read_text())))), flush=True)
