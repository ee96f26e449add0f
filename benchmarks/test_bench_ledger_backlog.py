"""The ledger's backlog under a c=64 load, 5 s of it (``python -m benchmarks.ledger_backlog`` runs 60 s).

The timing is the load itself; what matters is ``extra_info``: the peak and median backlog
(goal: under 1,000 records) and whether every call's record reached the store.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks._loopback import serving
from benchmarks.ledger_backlog import sustained


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serving() as base_url:  # started before the test moves to its own folder
        yield base_url


def test_ledger_backlog_at_c64(benchmark: Any, loop: asyncio.AbstractEventLoop, url: str, tmp_path: Path) -> None:
    found = benchmark.pedantic(lambda: loop.run_until_complete(sustained(url, tmp_path, seconds=5.0)),
                               rounds=1, iterations=1)
    benchmark.extra_info.update(peak=found.peak, median=statistics.median(found.samples or [0]),
                                calls=found.calls, stored=found.stored)
    assert found.stored == found.calls  # no record dropped
