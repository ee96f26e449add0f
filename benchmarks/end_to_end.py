"""End to end: what a call costs through provmw, next to a bare aiohttp POST, interleaved.

Every contender posts the same chat completion to one loopback server (its own process,
:mod:`benchmarks._loopback`) and reads the same answer:

- ``raw``: ``session.post(...)`` and ``response.json()`` on one shared aiohttp session;
- ``adapter``: ``OpenAIAdapter.chat`` alone, on provmw's ``HttpClient``;
- ``bare``: ``manager.chat`` with every middleware disabled;
- ``full``: ``manager.chat`` with the README's settings (fallback chain, cache on and
  missing, retry, breaker, deadline, rate limits that never bind, a SQLite ledger);
- ``budget``: ``full`` plus one strict per-user budget in the ledger's SQLite file;
- ``hit``: ``full`` asked the same question every time: a cache hit through ``manager.chat``;
- ``pool``: ``full`` whose default is a pool of four deployments of the model (``least_busy``,
  the fallback chain on the pool): what choosing a deployment adds to a call;
- ``floor``: one hand-written function doing ``full``'s jobs (:mod:`benchmarks.floor`);
- ``openai-sdk`` and ``litellm``: the peers, when the ``peers`` extra is installed.

The machine is shared, so rounds are interleaved (each round runs every contender once,
in a rotated order) and the table shows medians over rounds, with the range. At c=64 the
client is CPU bound, so the table also gives its CPU time per call (``time.process_time``:
user and system, every thread of the process; the server's is not in it). Script mode::

    python -m benchmarks.end_to_end --rounds 7 --calls 300 --concurrent-calls 1280
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks._loopback import serving
from benchmarks.floor import floor
from provmw.config import ProviderConfig
from provmw.http import HttpClient
from provmw.manager import ServiceManager
from provmw.messages import Message
from provmw.plugins import PluginHost, PluginPolicy
from provmw.providers.openai import OpenAIAdapter
from provmw.requests import ChatRequest
from provmw.settings import load_settings

__all__ = ["CONTENDERS", "Call", "contender", "main", "per_call_us", "throughput"]

Call = Callable[[int], Awaitable[object]]
KEY = "sk-bench"
OPTIONS = {"temperature": 0, "max_tokens": 512}
BUILTINS = ("deadline", "usage_hits", "idempotency", "cache", "budget", "fallback", "rate_limit", "retry",
            "circuit_breaker", "usage", "timeout")

# The README's settings; the rate limits are raised so that they never bind, and the budget
# (in the ledger's file, as the README has it) is far above what a run spends.
FULL = """
default = "primary"
[configurations.primary]
provider = "openai"
model = "gpt-4o-mini"
base_url = "{url}"
api_key_env = "PROVMW_BENCH_KEY"
fallbacks = ["backup"]
timeout_s = 30
options = {{ temperature = 0, max_tokens = 512 }}
[configurations.primary.price]
input_usd_per_mtok = 0.15
cached_input_usd_per_mtok = 0.075
output_usd_per_mtok = 0.60
[configurations.backup]
provider = "anthropic"
model = "claude-3-5-haiku-latest"
base_url = "{url}"
api_key_env = "PROVMW_BENCH_KEY"
[middleware.retry]
max_attempts = 3
max_wait_s = 8
budget_share = 0.2
[middleware.circuit_breaker]
window_size = 20
min_calls = 10
failure_rate = 0.5
open_s = 30
half_open_probes = 3
[middleware.deadline]
default_s = 120
[middleware.cache]
operations = ["embedding", "chat"]
[middleware.rate_limit.limits.primary]
requests_per_minute = 100000000
tokens_per_minute = 100000000000
max_concurrency = 1000
[middleware.usage]
path = "provmw.sqlite3"
synchronous = "normal"
"""
BUDGET = """
[middleware.budget]
mode = "strict"
timezone = "America/Los_Angeles"
path = "provmw.sqlite3"
[[middleware.budget.limits]]
scope = "user"
match = "*"
period = "day"
max_cost_usd = 1000000.0
"""
# ``full`` with the pool as the default: ``primary`` and three inline deployments of it.
POOL = FULL.replace('default = "primary"', 'default = "gpt"') + """
[pools.gpt]
strategy = "least_busy"
members = ["primary"]
fallbacks = ["backup"]
[pools.gpt.deployments.east]
base = "primary"
[pools.gpt.deployments.west]
base = "primary"
[pools.gpt.deployments.north]
base = "primary"
"""
BARE = 'default = "primary"\n[configurations.primary]\nprovider = "openai"\nmodel = "gpt-4o-mini"\n' \
       'base_url = "{url}"\napi_key_env = "PROVMW_BENCH_KEY"\noptions = {{ temperature = 0, max_tokens = 512 }}\n' \
       + "".join(f"[middleware.{name}]\nenabled = false\n" for name in BUILTINS)

_prompts = iter(range(10**12))


def prompt() -> str:
    """A prompt never sent before in this process: every cached contender misses."""
    return f"Say hello to visitor number {next(_prompts)}"


@asynccontextmanager
async def raw(url: str, folder: Path) -> Any:
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {KEY}"}

        async def call(_: int) -> object:
            body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt()}], **OPTIONS}
            async with session.post(f"{url}/chat/completions", json=body, headers=headers) as response:
                return await response.json()

        yield call


@asynccontextmanager
async def adapter(url: str, folder: Path) -> Any:
    http, openai = HttpClient(), OpenAIAdapter()
    config = ProviderConfig(identifier="primary", provider="openai", model="gpt-4o-mini", base_url=url,
                            api_key=KEY, options=OPTIONS)
    try:
        yield lambda _: openai.chat(http, config, ChatRequest((Message.user(prompt()),)))
    finally:
        await http.aclose()


def _manager(text: str, folder: Path, http: HttpClient | None = None) -> ServiceManager:
    """A manager on the settings ``text``; ``http``: the client it sends through (the CPU benchmarks' instant one)."""
    path = folder / "provmw.toml"
    path.write_text(text)
    host = PluginHost(PluginPolicy(autoload=False), environ={})
    return ServiceManager(load_settings(path, environ={**os.environ, "PROVMW_BENCH_KEY": KEY}), host=host, http=http)


Contender = Callable[[str, Path], AbstractAsyncContextManager[Call]]


def _managed(template: str, text: Callable[[], str] = prompt) -> Contender:
    @asynccontextmanager
    async def run(url: str, folder: Path) -> Any:
        async with _manager(template.format(url=url), folder) as manager:
            yield lambda _: manager.chat(text(), user="ada", tenant="acme")

    return run


@asynccontextmanager
async def openai_sdk(url: str, folder: Path) -> Any:
    openai: Any = importlib.import_module("openai")  # the peers extra, untyped when absent

    client = openai.AsyncOpenAI(api_key=KEY, base_url=url, max_retries=0)
    try:
        yield lambda _: client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": prompt()}], **OPTIONS)
    finally:
        await client.close()


@asynccontextmanager
async def litellm(url: str, folder: Path) -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch from the network at import
    peer: Any = importlib.import_module("litellm")  # the peers extra

    yield lambda _: peer.acompletion(model="openai/gpt-4o-mini", api_base=url, api_key=KEY, num_retries=0,
                                     messages=[{"role": "user", "content": prompt()}], **OPTIONS)


def contender(name: str) -> Contender:
    """The factory of the contender called ``name``: given the base URL and a folder, it yields a call."""
    return CONTENDERS[name]


CONTENDERS: dict[str, Contender] = {
    "raw": raw, "adapter": adapter, "bare": _managed(BARE), "full": _managed(FULL),
    "budget": _managed(FULL + BUDGET), "hit": _managed(FULL, lambda: "Say hello"), "pool": _managed(POOL),
    "floor": functools.partial(floor, key=KEY, options=OPTIONS, prompt=prompt),
    "openai-sdk": openai_sdk, "litellm": litellm,
}
_PEERS = {"openai-sdk": "openai", "litellm": "litellm"}


def installed() -> list[str]:
    """The contenders this environment can run (a peer only when its package is installed)."""
    return [n for n in CONTENDERS if n not in _PEERS or importlib.util.find_spec(_PEERS[n]) is not None]


async def per_call_us(call: Call, calls: int) -> float:
    """Microseconds per call, ``calls`` made one after another."""
    started = time.perf_counter()
    for i in range(calls):
        await call(i)
    return (time.perf_counter() - started) / calls * 1e6


async def throughput(call: Call, calls: int, concurrency: int) -> float:
    """Calls per second, ``calls`` made by ``concurrency`` workers at once."""
    numbers = iter(range(calls))

    async def worker() -> None:
        for i in numbers:
            await call(i)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return calls / (time.perf_counter() - started)


@contextmanager
def _folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="provmw-bench-") as name:
        yield Path(name)


async def _rounds(url: str, names: list[str], args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    results: dict[str, dict[str, list[float]]] = {n: {"c1": [], "c64": [], "cpu64": []} for n in names}
    with _folder() as folder:
        calls: dict[str, Call] = {}
        async with _opened(names, url, folder, calls):
            for name in names:  # warm each up: sessions, connections, files, caches of code
                await per_call_us(calls[name], 50)
            for round_ in range(args.rounds):
                order = names[round_ % len(names):] + names[:round_ % len(names)]
                for name in order:
                    results[name]["c1"].append(await per_call_us(calls[name], args.calls))
                    cpu = time.process_time()
                    results[name]["c64"].append(await throughput(calls[name], args.concurrent_calls, 64))
                    cpu = (time.process_time() - cpu) / args.concurrent_calls * 1e6
                    results[name]["cpu64"].append(cpu)
                print(f"round {round_ + 1}/{args.rounds} done", flush=True)
    return results


@asynccontextmanager
async def _opened(names: list[str], url: str, folder: Path, calls: dict[str, Call]) -> Any:
    async with AsyncExitStack() as stack:
        for name in names:
            own = folder / name
            own.mkdir()
            calls[name] = await stack.enter_async_context(contender(name)(url, own))
        yield


def _span(values: list[float], scale: float = 1.0) -> str:
    return f"{statistics.median(values) / scale:,.0f} ({min(values) / scale:,.0f}-{max(values) / scale:,.0f})"


def table(results: dict[str, dict[str, list[float]]]) -> str:
    """Markdown: per-call time at c=1 and throughput at c=64, medians (ranges), ratios to raw;
    and the client's CPU (user and system, every thread) per call at c=64, where it is the bound."""
    raw_c1 = statistics.median(results["raw"]["c1"])
    raw_c64 = statistics.median(results["raw"]["c64"])
    raw_cpu = statistics.median(results["raw"]["cpu64"])
    lines = ["| contender | c=1 us/call median (range) | x raw | c=64 calls/s median (range) | raw / this "
             "| c=64 CPU us/call median (range) | x raw |",
             "|---|---|---|---|---|---|---|"]
    for name, found in results.items():
        c1, c64, cpu = (statistics.median(found[k]) for k in ("c1", "c64", "cpu64"))
        lines.append(f"| {name} | {_span(found['c1'])} | {c1 / raw_c1:.2f} | {_span(found['c64'])} | "
                     f"{raw_c64 / c64:.2f} | {_span(found['cpu64'])} | {cpu / raw_cpu:.2f} |")
    return "\n".join(lines)


def cold_start_ms(runs: int = 5) -> tuple[float, bool]:
    """The median of ``import provmw; ServiceManager()`` in fresh interpreters, and whether redis got imported.

    A first run writes the bytecode cache, as ``pip install`` does for an installed package, so
    that what is timed is the import, not compiling provmw's sources (about 90 ms more): with
    ``PYTHONDONTWRITEBYTECODE`` set and an editable install, every run would compile them again.
    """
    code = ("import sys, time; t = time.perf_counter(); import provmw; provmw.ServiceManager(); "
            "print((time.perf_counter() - t) * 1000, 'redis' in sys.modules)")
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    times, redis = [], False
    with _folder() as folder:
        for _ in range(runs + 1):
            out = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True,
                                 check=True, env=environ)
            ms, imported = out.stdout.split()
            times.append(float(ms))
            redis = redis or imported == "True"
    return statistics.median(times[1:]), redis


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300, help="sequential calls per contender per round")
    parser.add_argument("--concurrent-calls", type=int, default=1280, help="calls per round at c=64")
    parser.add_argument("--only", nargs="*", default=None, help="contenders to run (default: all installed)")
    args = parser.parse_args(argv)
    names = args.only or installed()
    if "raw" not in names:
        names.insert(0, "raw")
    with serving() as url:
        results = asyncio.run(_rounds(url, names, args))
    print(table(results))
    ms, redis = cold_start_ms()
    print(f"cold import provmw + ServiceManager(): {ms:.0f} ms median of 5, bytecode cached"
          f"{' (imports redis)' if redis else ''}")


if __name__ == "__main__":
    main()
