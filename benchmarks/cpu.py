"""What provmw's own code costs per call, with no socket: the end-to-end contenders' CPU alone.

The end-to-end benchmark's figures carry the loopback server's and the kernel's noise; here
the manager's HTTP client answers every POST after one turn of the loop with the loopback
server's bytes (decoded as a real answer is), so what is timed is the manager, the middleware, the
adapter's request building and answer reading, the ledger and the budget: provmw's part
of a call. Best of ``--rounds`` rounds of ``--calls`` calls, sequential (c=1) and by 64
workers (c=64); ``--profile NAME`` prints where one contender's time goes::

    python -m benchmarks.cpu
    python -m benchmarks.cpu --only full budget --profile budget
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks._loopback import ANSWER
from benchmarks.end_to_end import BARE, BUDGET, FULL, _manager, prompt
from provmw.http import HttpClient, decode_json
from provmw.manager import ServiceManager

__all__ = ["InstantHttp", "main"]

URL = "http://127.0.0.1:9/v1"
TEMPLATES = {"bare": (BARE, prompt), "full": (FULL, prompt), "budget": (FULL + BUDGET, prompt),
             "hit": (FULL, lambda: "Say hello")}


class InstantHttp(HttpClient):
    """An HTTP client whose every JSON POST gets the loopback server's answer, decoded, after one
    turn of the loop (as a socket read gives the loop a turn: the ledger's writer and every other
    task run meanwhile, as they do in a real call; without it they would never run while timed)."""

    async def post_json(self, url: Any, body: Any, headers: Mapping[str, str]) -> Any:
        await asyncio.sleep(0)
        return decode_json(ANSWER)


async def _per_call_us(manager: ServiceManager, text: Any, calls: int, concurrency: int) -> float:
    numbers = iter(range(calls))

    async def worker() -> None:
        for _ in numbers:
            await manager.chat(text(), user="ada", tenant="acme")

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.perf_counter() - started) / calls * 1e6


async def _run(names: list[str], args: argparse.Namespace, folder: Path) -> dict[str, dict[int, float]]:
    best: dict[str, dict[int, float]] = {n: {1: float("inf"), 64: float("inf")} for n in names}
    managers = {}
    for name in names:
        (folder / name).mkdir()
        managers[name] = _manager(TEMPLATES[name][0].format(url=URL), folder / name, InstantHttp())
    try:
        for name in names:  # warm up
            await _per_call_us(managers[name], TEMPLATES[name][1], 200, 1)
        for _ in range(args.rounds):
            for name in names:
                for concurrency in (1, 64):
                    took = await _per_call_us(managers[name], TEMPLATES[name][1], args.calls, concurrency)
                    best[name][concurrency] = min(best[name][concurrency], took)
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            await _per_call_us(managers[args.profile], TEMPLATES[args.profile][1], args.calls, args.profile_concurrency)
            profile.disable()
            pstats.Stats(profile).sort_stats(args.sort).print_stats(args.lines)
    finally:
        for manager in managers.values():
            await manager.aclose()
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--only", nargs="*", default=list(TEMPLATES), choices=list(TEMPLATES))
    parser.add_argument("--profile", choices=list(TEMPLATES), default=None)
    parser.add_argument("--profile-concurrency", type=int, default=1)
    parser.add_argument("--sort", default="tottime")
    parser.add_argument("--lines", type=int, default=40)
    args = parser.parse_args(argv)
    names = list(dict.fromkeys([*args.only, *([args.profile] if args.profile else [])]))
    with tempfile.TemporaryDirectory(prefix="provmw-cpu-") as name:
        best = asyncio.run(_run(names, args, Path(name)))
    print("| contender | c=1 us/call (best) | c=64 us/call (best) |\n|---|---|---|")
    for contender, figures in best.items():
        print(f"| {contender} | {figures[1]:.1f} | {figures[64]:.1f} |")


if __name__ == "__main__":
    main()
