"""What durable recording costs a call: ``usage`` only, against no middleware at all.

Each call goes through a ``ServiceManager`` to the fake provider on loopback and returns
only once its ledger record is committed to the SQLite file (WAL; ``synchronous`` NORMAL,
the default, or FULL). At concurrency 1 every call pays one commit; at 64, concurrent
records share one commit (group commit). 256 calls per round. ``python -m
benchmarks.durable_recording`` times c=1 as alternating pairs, which a shared machine's drift moves less.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.durable_recording import manager
from provmw.testing import FakeProvider

CALLS = 256


@pytest.fixture
def fake(loop: asyncio.AbstractEventLoop) -> Iterator[FakeProvider]:
    server = loop.run_until_complete(FakeProvider().start())
    yield server
    loop.run_until_complete(server.stop())


@pytest.mark.parametrize("concurrency", [1, 64])
@pytest.mark.parametrize("synchronous", ["off", "normal", "full"])
def test_durable_recording(benchmark: Any, loop: asyncio.AbstractEventLoop, fake: FakeProvider, tmp_path: Path,
                           synchronous: str, concurrency: int) -> None:
    service = manager(fake, tmp_path / "u.db", synchronous)

    async def round_() -> None:
        for _ in range(CALLS // concurrency):
            await asyncio.gather(*(service.chat("hello") for _ in range(concurrency)))

    benchmark.group = f"durable recording, c={concurrency}, {CALLS} calls"
    benchmark(lambda: loop.run_until_complete(round_()))
    loop.run_until_complete(service.aclose())
