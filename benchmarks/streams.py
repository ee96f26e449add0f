"""Streams: what the default stack adds per chunk, and to the first chunk, next to a bare aiohttp loop.

Both contenders read the same server-sent events from the loopback server
(:mod:`benchmarks._loopback`): ``raw`` posts with aiohttp and decodes each ``data:`` line as
JSON; ``full`` is ``manager.stream_chat`` through the README's stack. A stream of ``--chunks``
content chunks and a stream of one are timed in turn (interleaved rounds, medians); the
difference over the extra chunks is the cost per chunk, and the one-chunk stream is the time
to the first chunk. Goals: at most 5 µs per chunk over raw; the first chunk late by at most
what the stack adds to a unary call. Script mode::

    python -m benchmarks.streams --rounds 7 --chunks 500
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks._loopback import serving
from benchmarks.end_to_end import FULL, KEY, _manager, prompt

__all__ = ["Streamer", "per_chunk_us", "raw", "full"]

Streamer = Callable[[int], AsyncIterator[object]]


@asynccontextmanager
async def raw(url: str, folder: Path) -> Any:
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {KEY}"}

        async def stream(chunks: int) -> AsyncIterator[object]:
            body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt()}], "stream": True,
                    "temperature": 0, "max_tokens": chunks}
            async with session.post(f"{url}/chat/completions", json=body, headers=headers) as response:
                async for line in response.content:
                    if line.startswith(b"data: ") and line[6:].strip() != b"[DONE]":
                        yield json.loads(line[6:])

        yield stream


@asynccontextmanager
async def full(url: str, folder: Path) -> Any:
    async with _manager(FULL.format(url=url), folder) as manager:
        yield lambda chunks: manager.stream_chat(prompt(), user="ada", tenant="acme", max_tokens=chunks)


async def _drain(stream: Streamer, chunks: int) -> float:
    started = time.perf_counter()
    async for _ in stream(chunks):
        pass
    return time.perf_counter() - started


async def per_chunk_us(stream: Streamer, chunks: int, repeats: int = 20) -> tuple[float, float]:
    """(µs per chunk beyond the first, µs to read a one-chunk stream), medians of ``repeats``."""
    long = [await _drain(stream, chunks) for _ in range(repeats)]
    short = [await _drain(stream, 1) for _ in range(repeats)]
    first = statistics.median(short)
    return (statistics.median(long) - first) / (chunks - 1) * 1e6, first * 1e6


async def _rounds(url: str, args: argparse.Namespace) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {"raw": [], "full": []}
    with tempfile.TemporaryDirectory(prefix="provmw-streams-") as name:
        async with raw(url, Path(name)) as bare, full(url, Path(name)) as stack:
            streams = {"raw": bare, "full": stack}
            for stream in streams.values():
                await per_chunk_us(stream, args.chunks, 3)  # warm up
            for round_ in range(args.rounds):
                for name_ in (["raw", "full"] if round_ % 2 == 0 else ["full", "raw"]):
                    results[name_].append(await per_chunk_us(streams[name_], args.chunks))
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--chunks", type=int, default=500)
    args = parser.parse_args(argv)
    with serving() as url:
        results = asyncio.run(_rounds(url, args))
    print("| contender | per chunk us, median (range) | one-chunk stream us, median (range) |\n|---|---|---|")
    for name, found in results.items():
        per, first = [f[0] for f in found], [f[1] for f in found]
        print(f"| {name} | {statistics.median(per):.1f} ({min(per):.1f}-{max(per):.1f}) | "
              f"{statistics.median(first):,.0f} ({min(first):,.0f}-{max(first):,.0f}) |")
    extra = [f[0] - r[0] for f, r in zip(results["full"], results["raw"], strict=True)]
    print(f"full adds {statistics.median(extra):.1f} us per chunk (range {min(extra):.1f}-{max(extra):.1f})")


if __name__ == "__main__":
    main()
