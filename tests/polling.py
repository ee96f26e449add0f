"""Bounded polling: wait for what a background task will do, as long as it takes and no longer than a bound.

A fixed ``sleep`` before an assertion is too short on a loaded machine and too long on an idle
one; ``eventually`` reads until the condition holds (returning at once when it already does),
gives up after ``within_s``, and hands back the last reading for the test to assert on, so a
failure still shows what was seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(read: Callable[[], T], done: Callable[[T], bool], *, within_s: float = 5.0,
                     every_s: float = 0.005) -> T:
    """``read()`` until ``done`` holds of its value or ``within_s`` passes; the last value read."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + within_s
    value = read()
    while not done(value) and loop.time() < give_up:
        await asyncio.sleep(every_s)
        value = read()
    return value
