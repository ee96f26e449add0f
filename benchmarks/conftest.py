from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings built in code keep ``provmw.sqlite3`` in the working folder, the embedded defaults
    in the user's data folder: both are the test's own."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))


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
