from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded usage ledger writes ``provmw.sqlite3`` in the working directory."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    event_loop = asyncio.new_event_loop()
    yield event_loop
    event_loop.close()


def run_batch(loop: asyncio.AbstractEventLoop, make: Callable[[], Awaitable[Any]], calls: int) -> Callable[[], None]:
    """A benchmark target that awaits ``calls`` sequential calls inside one loop turn."""

    async def batch() -> None:
        for _ in range(calls):
            await make()

    return lambda: loop.run_until_complete(batch())
