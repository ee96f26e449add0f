"""The end-to-end contenders of :mod:`benchmarks.end_to_end` under pytest-benchmark, one at a time.

pytest-benchmark runs each contender's rounds back to back, so on a shared machine its
ratios drift with the neighbours' load; ``python -m benchmarks.end_to_end`` interleaves
them and is what ``docs/performance.md`` reports. 100 sequential calls per round.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks._loopback import serving
from benchmarks.end_to_end import contender, installed, per_call_us

CALLS = 100


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serving() as base_url:
        yield base_url


@pytest.mark.parametrize("name", installed())
def test_end_to_end(benchmark: Any, loop: asyncio.AbstractEventLoop, url: str, tmp_path: Path, name: str) -> None:
    opened = contender(name)(url, tmp_path)
    call = loop.run_until_complete(opened.__aenter__())
    try:
        benchmark.group = f"end to end, c=1, {CALLS} calls"
        benchmark(lambda: loop.run_until_complete(per_call_us(call, CALLS)))
    finally:
        loop.run_until_complete(opened.__aexit__(None, None, None))
