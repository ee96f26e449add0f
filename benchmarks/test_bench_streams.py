"""Streams through ``manager.stream_chat`` next to a bare aiohttp loop, one at a time
(``python -m benchmarks.streams`` interleaves them). ``extra_info`` holds the cost per chunk
and the time to a one-chunk stream; goal: the stack adds at most 5 µs per chunk."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks import streams
from benchmarks._loopback import serving

CHUNKS = 200


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serving() as base_url:
        yield base_url


@pytest.mark.parametrize("name", ["raw", "full"])
def test_stream(benchmark: Any, loop: asyncio.AbstractEventLoop, url: str, tmp_path: Path, name: str) -> None:
    opened = getattr(streams, name)(url, tmp_path)
    stream = loop.run_until_complete(opened.__aenter__())
    try:
        benchmark.group = f"stream of {CHUNKS} chunks"
        per_chunk, first = benchmark.pedantic(
            lambda: loop.run_until_complete(streams.per_chunk_us(stream, CHUNKS, 5)), rounds=3, iterations=1)
        benchmark.extra_info.update(per_chunk_us=per_chunk, one_chunk_stream_us=first)
    finally:
        loop.run_until_complete(opened.__aexit__(None, None, None))
