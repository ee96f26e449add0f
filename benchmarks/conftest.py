from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest


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
