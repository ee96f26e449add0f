"""The gateway's added latency: a chat completion through ``provmw serve`` against the same one sent
straight to the fake provider, sequentially, one connection each (issue 38: at most 0.5 ms median).

The fake provider and the gateway each run in a process of their own, as in the published figures
(Portkey 2.37 ms, LiteLLM 4.34 ms, Bifrost 0.44 ms); the client alternates a direct call and a
gateway call in every round, so both see the same machine load, and reports the medians and their
difference (``-s`` shows it; ``extra_info`` keeps it in the saved JSON). Two stacks: "bare" (every
built-in layer off: the server itself, the key check and the wire mapping) and "default" (the
built-in stack, ledger and budgets included), both with plugin autoload off (this environment's
guard and otel plugins would add their own layers); and "floor", an aiohttp server that only forwards the
bytes (``benchmarks._forwarder``): what any Python gateway on aiohttp adds at the least.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from benchmarks.gateway_processes import child
from provmw.gateway import SqliteKeyStore

ROUNDS = 2000
BODY = {"model": "chat", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 16}
BUILTIN = ("deadline", "usage_hits", "idempotency", "cache", "budget", "fallback", "rate_limit", "structured_output",
           "retry", "circuit_breaker", "usage", "timeout")


@pytest.fixture(scope="module")
def fake_url() -> Iterator[str]:
    with child(["-m", "provmw.testing", "--port", "0"], "listening on ") as url:
        yield url


def _settings(path: Path, fake_url: str, stack: str) -> Path:
    text = (f'[configurations.chat]\nprovider = "openai"\nmodel = "gpt-4o-mini"\nbase_url = "{fake_url}/v1"\n'
            f'api_key_env = "BENCH_UPSTREAM_KEY"\n[middleware.usage]\npath = "{path / "ledger.sqlite3"}"\n'
            f'[middleware.budget]\npath = "{path / "budget.sqlite3"}"\n'
            '[plugins]\nautoload = false\n')  # provmw's own stack, whatever else this environment installed
    if stack == "bare":
        text += "".join(f"[middleware.{name}]\nenabled = false\n" for name in BUILTIN if name not in ("usage",
                                                                                                       "budget"))
        text = text.replace("[middleware.usage]\n", "[middleware.usage]\nenabled = false\n")
        text = text.replace("[middleware.budget]\n", "[middleware.budget]\nenabled = false\n")
    (path / "provmw.toml").write_text(text)
    return path / "provmw.toml"


async def _timed(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> float:
    started = time.perf_counter()
    async with session.post(url, json=BODY, headers=headers) as response:
        await response.read()
        assert response.status == 200
    return time.perf_counter() - started


@pytest.mark.parametrize("stack", ["floor", "bare", "default"])
def test_gateway_added_latency(benchmark: Any, loop: asyncio.AbstractEventLoop, fake_url: str, tmp_path: Path,
                               stack: str) -> None:
    if stack == "floor":
        with child(["-m", "benchmarks._forwarder", fake_url], "listening on ") as forwarder:
            _report(benchmark, stack, *_measure(benchmark, loop, fake_url, forwarder, "unchecked"))
        return
    keys = SqliteKeyStore(tmp_path / "keys.sqlite3")
    key, _ = loop.run_until_complete(keys.create("bench"))
    loop.run_until_complete(keys.aclose())
    settings = _settings(tmp_path, fake_url, stack)
    serve = ["-m", "provmw.cli", "--config", str(settings), "serve", "--port", "0", "--keys",
             str(tmp_path / "keys.sqlite3")]
    with child(serve, "listening on ", env={**os.environ, "BENCH_UPSTREAM_KEY": "sk-bench"}) as gateway_url:
        _report(benchmark, stack, *_measure(benchmark, loop, fake_url, gateway_url, key))


def _report(benchmark: Any, stack: str, direct: list[float], through: list[float]) -> None:
    added_ms = (statistics.median(through) - statistics.median(direct)) * 1000
    benchmark.extra_info.update(direct_median_ms=statistics.median(direct) * 1000,
                                gateway_median_ms=statistics.median(through) * 1000, added_median_ms=added_ms)
    print(f"\ngateway ({stack} stack): direct {statistics.median(direct) * 1000:.3f} ms, through the gateway "
          f"{statistics.median(through) * 1000:.3f} ms, added {added_ms:.3f} ms (median of {len(direct)})")


def _measure(benchmark: Any, loop: asyncio.AbstractEventLoop, fake_url: str, gateway_url: str,
             key: str) -> tuple[list[float], list[float]]:
    session = loop.run_until_complete(_session())
    direct: list[float] = []
    through: list[float] = []
    upstream = {"authorization": "Bearer sk-bench"}
    ours = {"authorization": f"Bearer {key}"}

    async def pair() -> None:
        direct.append(await _timed(session, f"{fake_url}/v1/chat/completions", upstream))
        through.append(await _timed(session, f"{gateway_url}/v1/chat/completions", ours))

    try:
        benchmark.group = "gateway added latency, c=1"
        benchmark.pedantic(lambda: loop.run_until_complete(pair()), rounds=ROUNDS, warmup_rounds=200)
    finally:
        loop.run_until_complete(session.close())
    warm = max(len(direct) - ROUNDS, 0)  # the warm-up rounds made (none when benchmarks are disabled: one round)
    return direct[warm:], through[warm:]


async def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4))
