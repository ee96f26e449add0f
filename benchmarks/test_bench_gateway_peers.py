"""The gateway side by side with LiteLLM's proxy, against the same fake provider (issue 38: with
``--workers 2``, at least 3x LiteLLM's throughput with the same stack features on, with no error).

Throughput: ``provmw serve --workers 2`` on the default stack (ledger, budgets (each key's high
enough never to bind), retry, breaker, fallback to a second configuration) and LiteLLM's proxy
with ``--num_workers 2`` (``benchmarks.litellm_proxy`` says what it runs with), one after the
other, each loaded by the same load generator in a process of its own (``benchmarks._load``):
``CONCURRENCY`` connections sending the same chat completion for ``DURATION_S`` after a warm-up.
Requests a second, errors, p50/p99 latency, the fake's calls and the server's CPU per request sent
and the ratios are printed (``-s``) and kept in ``extra_info``, with PASS or FAIL against the 3x
floor (never asserted: a timing). Added latency: one connection, each round a call straight to
the fake, one through the gateway and one through LiteLLM's proxy (one worker each), as
``test_bench_gateway`` measures it.

Without LiteLLM's proxy (``benchmarks.litellm_proxy.INSTALL`` says how to get it) its half is
skipped. Every process shares this machine's cores with the others: the ratio is the figure, the
absolute rates are no ceiling.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from benchmarks import litellm_proxy
from benchmarks.gateway_processes import ROOT, child, cpu_s, gateway, make_keys, stack_settings
from benchmarks.test_bench_gateway import BODY, ROUNDS, _timed

CONCURRENCY = 64
KEYS = 8
WARMUP_S, DURATION_S = 5.0, 20.0
FLOOR = 3.0


@pytest.fixture(scope="module")
def fake_url() -> Iterator[str]:
    with child(["-m", "provmw.testing", "--port", "0"], "listening on ") as url:
        yield url


def _serve(tmp_path: Path, fake_url: str, *workers: str) -> list[str]:
    return ["-m", "provmw.cli", "--config", str(stack_settings(tmp_path, fake_url)), "serve", "--port", "0",
            "--keys", str(tmp_path / "keys.sqlite3"), *workers]


def _upstream_calls(fake_url: str) -> int:
    with urllib.request.urlopen(f"{fake_url}/_admin/requests") as answer:
        return int(json.load(answer)["total"])


def _load(url: str, keys: list[str], path: Path, quick: bool) -> dict[str, Any]:
    """The load generator's summary of ``CONCURRENCY`` connections sending ``BODY`` to ``url``."""
    warmup_s, duration_s = (0.5, 2.0) if quick else (WARMUP_S, DURATION_S)
    requests = [{"path": "/v1/chat/completions", "body": BODY, "key": key} for key in keys]
    path.write_text(json.dumps({"url": url, "concurrency": CONCURRENCY, "warmup_s": warmup_s,
                                "duration_s": duration_s, "report_s": duration_s, "requests": requests}))
    done = subprocess.run([sys.executable, "-m", "benchmarks._load", str(path)], cwd=ROOT, check=True,
                          capture_output=True, text=True)
    summary: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return summary


def _measured(server: tuple[str, int], keys: list[str], tmp_path: Path, quick: bool, fake_url: str) -> dict[str, Any]:
    """``_load`` on the server (URL, process id), with what each request sent cost: the fake's calls
    (1.00: every one went upstream once, none answered by a cache) and the CPU of the server's
    processes, which other load on the machine does not change as it changes requests a second."""
    url, pid = server
    calls, cpu = _upstream_calls(fake_url), cpu_s(pid)
    summary = _load(url, keys, tmp_path / "plan.json", quick)
    return {**summary, "upstream_per_request": (_upstream_calls(fake_url) - calls) / summary["sent"],
            "cpu_ms_per_request": (cpu_s(pid) - cpu) * 1000 / summary["sent"]}


def test_throughput_side_by_side(benchmark: Any, loop: asyncio.AbstractEventLoop, fake_url: str,
                                 tmp_path: Path) -> None:
    litellm = litellm_proxy.executable()
    keys = loop.run_until_complete(make_keys(tmp_path / "keys.sqlite3", KEYS, max_cost_usd=1e6, team="load"))
    rows: dict[str, dict[str, Any]] = {}

    def measure() -> None:
        with gateway(_serve(tmp_path, fake_url, "--workers", "2")) as ours:
            rows["provmw"] = _measured(ours, keys, tmp_path, benchmark.disabled, fake_url)
        if litellm is not None:
            with litellm_proxy.proxy(litellm, fake_url, tmp_path, workers=2) as theirs:
                rows["litellm"] = _measured(theirs, [litellm_proxy.MASTER_KEY], tmp_path, benchmark.disabled, fake_url)

    benchmark.group = f"gateway side by side, --workers 2, c={CONCURRENCY}"
    benchmark.pedantic(measure, rounds=1)
    _report_throughput(benchmark, rows)
    assert rows["provmw"]["errors"] == 0, rows["provmw"]["error_kinds"]
    if litellm is None:
        pytest.skip(f"the LiteLLM half: {litellm_proxy.INSTALL}")


def _report_throughput(benchmark: Any, rows: dict[str, dict[str, Any]]) -> None:
    print(f"\nside by side, 2 workers each, {CONCURRENCY} in flight, the same chat completion against the fake:")
    print(f"  {'':8} {'requests/s':>10} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8} {'upstream/request':>17} "
          f"{'CPU ms/request':>15}")
    for name, row in rows.items():
        print(f"  {name:8} {row['requests_per_s']:10.0f} {row['errors']:7d} {row['p50_ms']:8.1f} {row['p99_ms']:8.1f} "
              f"{row['upstream_per_request']:17.2f} {row['cpu_ms_per_request']:15.3f}")
        benchmark.extra_info[name] = {key: row[key] for key in ("requests_per_s", "errors", "p50_ms", "p99_ms",
                                                                "upstream_per_request", "cpu_ms_per_request")}
    if "litellm" in rows:
        ratio = rows["provmw"]["requests_per_s"] / rows["litellm"]["requests_per_s"]
        cpu_ratio = rows["litellm"]["cpu_ms_per_request"] / rows["provmw"]["cpu_ms_per_request"]
        passed = ratio >= FLOOR and rows["provmw"]["errors"] == 0
        benchmark.extra_info.update(ratio=ratio, cpu_ratio=cpu_ratio, floor=FLOOR, passed=passed)
        print(f"  provmw / litellm: {ratio:.2f}x the requests a second (floor {FLOOR:.0f}x): "
              f"{'PASS' if passed else 'FAIL'}; {cpu_ratio:.2f}x less CPU a request")


def test_added_latency_side_by_side(benchmark: Any, loop: asyncio.AbstractEventLoop, fake_url: str,
                                    tmp_path: Path) -> None:
    litellm = litellm_proxy.executable()
    if litellm is None:
        pytest.skip(litellm_proxy.INSTALL)
    key = loop.run_until_complete(make_keys(tmp_path / "keys.sqlite3", 1, max_cost_usd=1e6))[0]
    with gateway(_serve(tmp_path, fake_url)) as (ours, _), \
            litellm_proxy.proxy(litellm, fake_url, tmp_path, workers=1) as (theirs, _):
        targets = {"direct": (fake_url, "sk-bench"), "provmw": (ours, key),
                   "litellm": (theirs, litellm_proxy.MASTER_KEY)}
        times = _alternate(benchmark, loop, targets)
    _report_latency(benchmark, times)


def _alternate(benchmark: Any, loop: asyncio.AbstractEventLoop,
               targets: dict[str, tuple[str, str]]) -> dict[str, list[float]]:
    """Each round, one call to every target in turn, on one connection each; the times of each."""
    session = loop.run_until_complete(_session())
    times: dict[str, list[float]] = {name: [] for name in targets}

    async def round_() -> None:
        for name, (url, key) in targets.items():
            times[name].append(await _timed(session, f"{url}/v1/chat/completions", {"authorization": f"Bearer {key}"}))

    try:
        benchmark.group = "gateway added latency side by side, c=1"
        benchmark.pedantic(lambda: loop.run_until_complete(round_()), rounds=ROUNDS, warmup_rounds=200)
    finally:
        loop.run_until_complete(session.close())
    warm = max(len(times["direct"]) - ROUNDS, 0)  # the warm-up rounds made (none when benchmarks are disabled)
    return {name: made[warm:] for name, made in times.items()}


async def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4))


def _report_latency(benchmark: Any, times: dict[str, list[float]]) -> None:
    medians_ms = {name: statistics.median(made) * 1000 for name, made in times.items()}
    print(f"\nadded latency, one connection, median of {len(times['direct'])} rounds: direct "
          f"{medians_ms['direct']:.3f} ms")
    for name in ("provmw", "litellm"):
        added = medians_ms[name] - medians_ms["direct"]
        benchmark.extra_info.update({f"{name}_median_ms": medians_ms[name], f"{name}_added_median_ms": added})
        print(f"  {name:8} {medians_ms[name]:8.3f} ms, added {added:.3f} ms")
    benchmark.extra_info["direct_median_ms"] = medians_ms["direct"]
