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
import contextlib
import itertools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from benchmarks.test_bench_gateway import ROOT, _process, _settings
from provmw.gateway import SqliteKeyStore

REQUESTS = 2000
KEYS = 8


@pytest.fixture(scope="module")
def fake_url() -> Iterator[str]:
    with _process(["-m", "provmw.testing", "--port", "0"], "listening on ") as url:
        yield url


@contextlib.contextmanager
def _gateway(args: list[str]) -> Iterator[tuple[str, int]]:
    """``provmw serve`` in a child process: its URL and process id."""
    child = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                             env={**os.environ, "BENCH_UPSTREAM_KEY": "sk-bench"})
    try:
        assert child.stdout is not None
        while "listening on " not in (line := child.stdout.readline()):
            assert line, "the gateway exited before it listened"
        yield line.rsplit(" ", 1)[1].strip(), child.pid
    finally:
        child.terminate()
        child.wait(timeout=60)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its children, as ``/proc`` has them now."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    total = 0.0
    for each in (pid, *map(int, children)):
        with contextlib.suppress(FileNotFoundError):  # a child that ended meanwhile
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


async def _keys(path: Path) -> list[str]:
    store = SqliteKeyStore(path)
    keys = [(await store.create("bench", team="load"))[0] for _ in range(KEYS)]
    await store.aclose()
    return keys


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
    keys = loop.run_until_complete(_keys(tmp_path / "keys.sqlite3"))
    serve = ["-m", "provmw.cli", "--config", str(_settings(tmp_path, fake_url, "default")), "serve", "--port", "0",
             "--keys", str(tmp_path / "keys.sqlite3"), "--workers", str(workers)]
    with _gateway(serve) as (gateway_url, pid):
        session = loop.run_until_complete(_session(concurrency))
        numbers, rates, cpu = itertools.count(), [], []
        url = f"{gateway_url}/v1/chat/completions"

        def measured_round() -> None:
            before = _cpu_s(pid)
            rates.append(loop.run_until_complete(_round(session, url, keys, concurrency, numbers)))
            cpu.append((_cpu_s(pid) - before) / REQUESTS)

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
