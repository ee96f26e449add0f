"""The gateway's memory under constant load: ``provmw serve --workers 2`` for ``PROVMW_SOAK_S``
seconds (issue 38: each worker's RSS flat, within 10%, over 30 minutes).

A load generator of its own (``benchmarks._load``) keeps ``CONCURRENCY`` calls in flight, a mix
that goes through the error paths as well as the happy ones, so a leak in either shows: unary and
streamed chat (with the usage chunk), embeddings, a configuration whose upstream fails 30% of the
time (503: retried, then served by its fallback), one whose upstream always fails (500: retried,
then the breaker opens; the client sees a 503), and a key whose budget of one request a day
refuses (429). Every ``interval`` it reports, and this process reads each worker's ``VmRSS``;
the first sample (after the warm-up), the last, the largest and the drift (last against first)
are printed (``-s``) and kept in ``extra_info``. Any answer outside what its kind expects fails.

``PROVMW_SOAK_S`` unset: 1800 s, or 10 s when benchmarks are disabled (the CI smoke run), so
``./dev bench`` takes the whole half hour unless ``PROVMW_SOAK_S`` or ``-k "not soak"`` says otherwise.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from benchmarks.gateway_processes import (
    CONFIGURATIONS,
    ROOT,
    child,
    gateway,
    make_keys,
    rss_kib,
    stack_settings,
    worker_pids,
)

CONCURRENCY = 64
KEYS = 8
FLAT_PERCENT = 10.0
CHAT = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 16}
# what each kind of call sends, may answer, and its share of the turns
MIX = (({"path": "/v1/chat/completions", "body": {"model": "chat", **CHAT}}, [200], 4),
       ({"path": "/v1/chat/completions", "body": {"model": "chat", "stream": True,
                                                  "stream_options": {"include_usage": True}, **CHAT}}, [200], 2),
       ({"path": "/v1/embeddings", "body": {"model": "embed", "input": "hello there"}}, [200], 2),
       ({"path": "/v1/chat/completions", "body": {"model": "flaky", **CHAT}}, [200], 1),
       ({"path": "/v1/chat/completions", "body": {"model": "broken", **CHAT}}, [503], 1))
FAULTS = ({"fail": "503", "fail_rate": 0.3, "model": "gpt-4.1-mini"}, {"fail": "500", "model": "gpt-4.1-nano"})


@pytest.fixture(scope="module")
def fake_url() -> Iterator[str]:
    with child(["-m", "provmw.testing", "--port", "0"], "listening on ") as url:
        yield url


async def _inject_faults(fake_url: str) -> None:
    async with aiohttp.ClientSession() as session:
        for plan in FAULTS:
            async with session.post(f"{fake_url}/_admin/faults", json=plan) as response:
                assert response.status == 200, await response.text()


def _requests(keys: list[str], refused_key: str) -> list[dict[str, Any]]:
    """The plan's requests: the mix over every key, and one budget-refused call a round."""
    mixed = [{**call, "key": key, "expect": expect, "weight": weight} for key in keys for call, expect, weight in MIX]
    return [*mixed, {"path": "/v1/chat/completions", "body": {"model": "chat", **CHAT}, "key": refused_key,
                     "expect": [200, 429], "weight": len(keys)}]


async def _soak(path: Path, report_s: float, workers: list[int]) -> tuple[list[list[int]], dict[str, Any]]:
    """Run the load generator on the plan at ``path``; each worker's RSS (KiB) at each interval it
    reports (every ``report_s``), and its total."""
    load = await asyncio.create_subprocess_exec(sys.executable, "-m", "benchmarks._load", str(path), cwd=ROOT,
                                                stdout=asyncio.subprocess.PIPE)
    assert load.stdout is not None
    samples: list[list[int]] = []
    while line := await load.stdout.readline():
        report = json.loads(line)
        if report["kind"] == "total":
            break
        samples.append([rss_kib(pid) for pid in workers])
        print(f"soak: {len(samples) * report_s:.0f} s, {report['requests_per_s']:.0f} requests/s, "
              f"{report['errors']} errors, RSS " + ", ".join(f"{kib / 1024:.1f}" for kib in samples[-1]) + " MiB",
              flush=True)
    assert await load.wait() == 0
    return samples, report


def test_gateway_rss_soak(benchmark: Any, loop: asyncio.AbstractEventLoop, fake_url: str, tmp_path: Path) -> None:
    soak_s = float(os.environ.get("PROVMW_SOAK_S") or (10 if benchmark.disabled else 1800))
    loop.run_until_complete(_inject_faults(fake_url))
    keys = loop.run_until_complete(make_keys(tmp_path / "keys.sqlite3", KEYS, max_cost_usd=1e6, team="load"))
    refused = loop.run_until_complete(make_keys(tmp_path / "keys.sqlite3", 1, max_requests=1, team="refused"))[0]
    settings = stack_settings(tmp_path, fake_url, {**CONFIGURATIONS, "flaky": ("gpt-4.1-mini", ("backup",)),
                                                   "broken": ("gpt-4.1-nano", ())})
    serve = ["-m", "provmw.cli", "--config", str(settings), "serve", "--port", "0", "--keys",
             str(tmp_path / "keys.sqlite3"), "--workers", "2"]
    report_s = min(10.0, soak_s / 5)
    with gateway(serve) as (url, pid):
        plan = {"url": url, "concurrency": CONCURRENCY, "warmup_s": min(60.0, soak_s / 5), "duration_s": soak_s,
                "report_s": report_s, "requests": _requests(keys, refused)}
        (tmp_path / "plan.json").write_text(json.dumps(plan))
        benchmark.group = f"gateway RSS soak, --workers 2, c={CONCURRENCY}"
        workers = worker_pids(pid)
        outcome = benchmark.pedantic(
            lambda: loop.run_until_complete(_soak(tmp_path / "plan.json", report_s, workers)), rounds=1)
    samples, total = outcome
    _report(benchmark, soak_s, samples, total)
    assert total["errors"] == 0, total["error_kinds"]


def _report(benchmark: Any, soak_s: float, samples: list[list[int]], total: dict[str, Any]) -> None:
    rows = []
    for worker, series in enumerate(zip(*samples, strict=True)):
        first, last, peak = series[0], series[-1], max(series)
        drift = (last - first) / first * 100
        rows.append({"worker": worker, "first_mib": first / 1024, "last_mib": last / 1024, "max_mib": peak / 1024,
                     "drift_percent": drift})
    flat = all(abs(row["drift_percent"]) <= FLAT_PERCENT for row in rows)
    benchmark.extra_info.update(soak_s=soak_s, concurrency=CONCURRENCY, requests=total["requests"],
                                requests_per_s=total["requests_per_s"], statuses=total["statuses"],
                                errors=total["errors"], workers=rows, flat=flat)
    print(f"\ngateway RSS soak, --workers 2, {CONCURRENCY} in flight, {soak_s:.0f} s: {total['requests']} requests "
          f"({total['requests_per_s']:.0f}/s; statuses {total['statuses']}), {total['errors']} errors")
    for row in rows:
        print(f"  worker {row['worker']}: RSS first {row['first_mib']:.1f} MiB, last {row['last_mib']:.1f}, "
              f"max {row['max_mib']:.1f}, drift {row['drift_percent']:+.1f}%")
    print(f"  flat within {FLAT_PERCENT:.0f}%: {'PASS' if flat else 'FAIL'}")
