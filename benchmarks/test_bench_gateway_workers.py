"""The gateway's throughput: ``provmw serve --workers 2`` against ``--workers 1`` (issue 38).

The fake provider (``python -m provmw.testing``) and the gateway run in processes of their own;
this process is the load generator: ``CONCURRENCY`` chat completions in flight at once over
``KEYS`` keys (so the per-key limit of 64 in flight refuses none), each prompt different (so the
cache answers none and every call goes upstream), ``REQUESTS`` a round. The stack is the default
one (ledger, budgets, cache, retry, breaker...), plugin autoload off as in
``test_bench_gateway``. Each round's requests per second are printed (``-s``) and kept in
``extra_info``; every answer must be a 200. One load generator on this machine's cores, shared
with the fake and the workers: the figures compare the two settings, they are no ceiling. So
each round also reports the CPU the gateway's processes spent per request (Linux ``/proc``: the
parent and its workers), which other load on the machine does not change: on free cores, one
worker serves about ``1 / cpu_per_request`` requests a second.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from benchmarks.gateway_processes import child, cpu_s, gateway, make_keys
from benchmarks.test_bench_gateway import _settings

REQUESTS = 2000
KEYS = 8


@pytest.fixture(scope="module")
def fake_url() -> Iterator[str]:
    with child(["-m", "provmw.testing", "--port", "0"], "listening on ") as url:
        yield url


async def _round(session: aiohttp.ClientSession, url: str, keys: list[str], concurrency: int,
                 numbers: Iterator[int]) -> float:
    """``REQUESTS`` calls, ``concurrency`` at a time; the requests per second."""
    todo = iter(range(REQUESTS))

    async def client(key: str) -> None:
        for _ in todo:
            body = {"model": "chat", "max_tokens": 16,
                    "messages": [{"role": "user", "content": f"hello number {next(numbers)}"}]}
            async with session.post(url, json=body, headers={"authorization": f"Bearer {key}"}) as response:
                await response.read()
                assert response.status == 200, await response.text()

    started = time.perf_counter()
    await asyncio.gather(*(client(keys[n % len(keys)]) for n in range(concurrency)))
    return REQUESTS / (time.perf_counter() - started)


async def _session(concurrency: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))


@pytest.mark.parametrize("concurrency", [64, 500])
@pytest.mark.parametrize("workers", [1, 2])
def test_gateway_throughput(benchmark: Any, loop: asyncio.AbstractEventLoop, fake_url: str, tmp_path: Path,
                            workers: int, concurrency: int) -> None:
    keys = loop.run_until_complete(make_keys(tmp_path / "keys.sqlite3", KEYS, team="load"))
    serve = ["-m", "provmw.cli", "--config", str(_settings(tmp_path, fake_url, "default")), "serve", "--port", "0",
             "--keys", str(tmp_path / "keys.sqlite3"), "--workers", str(workers)]
    with gateway(serve) as (gateway_url, pid):
        session = loop.run_until_complete(_session(concurrency))
        numbers, rates, cpu = itertools.count(), [], []
        url = f"{gateway_url}/v1/chat/completions"

        def measured_round() -> None:
            before = cpu_s(pid)
            rates.append(loop.run_until_complete(_round(session, url, keys, concurrency, numbers)))
            cpu.append((cpu_s(pid) - before) / REQUESTS)

        try:
            benchmark.group = f"gateway throughput, {REQUESTS} requests, c={concurrency}"
            benchmark.pedantic(measured_round, rounds=3, warmup_rounds=1)
        finally:
            loop.run_until_complete(session.close())
    _report(benchmark, workers, concurrency, rates[1:] or rates, cpu[1:] or cpu)  # warm-up round left out


def _report(benchmark: Any, workers: int, concurrency: int, rates: list[float], cpu: list[float]) -> None:
    rate, cpu_ms = statistics.median(rates), statistics.median(cpu) * 1000
    benchmark.extra_info.update(workers=workers, concurrency=concurrency, requests_per_s=rate,
                                gateway_cpu_ms_per_request=cpu_ms)
    print(f"\ngateway throughput, --workers {workers}, {concurrency} in flight: {rate:.0f} requests/s, gateway CPU "
          f"{cpu_ms:.3f} ms a request (medians of {len(rates)} rounds of {REQUESTS})")
