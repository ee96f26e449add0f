"""The contenders of :mod:`benchmarks.cpu` under pytest-benchmark: provmw's own CPU per call, no socket.

``python -m benchmarks.cpu`` runs them interleaved (best of rounds) and is what
``docs/performance.md`` quotes; here each runs back to back, 200 sequential calls a round.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from benchmarks.cpu import TEMPLATES, URL, InstantHttp
from benchmarks.end_to_end import _manager

CALLS = 200


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_cpu_per_call(benchmark: Any, loop: asyncio.AbstractEventLoop, tmp_path: Path, name: str) -> None:
    template, text = TEMPLATES[name]
    manager = _manager(template.format(url=URL), tmp_path, InstantHttp())

    async def calls() -> None:
        for _ in range(CALLS):
            await manager.chat(text(), user="ada", tenant="acme")

    try:
        loop.run_until_complete(calls())  # warm up: files, caches of code
        benchmark.group = f"provmw's CPU per call (no socket), c=1, {CALLS} calls"
        benchmark(lambda: loop.run_until_complete(calls()))
    finally:
        loop.run_until_complete(manager.aclose())
