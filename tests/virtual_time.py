"""An event loop on virtual time: a wait for a timer costs no real time, and ``loop.time()`` is exact.

Code that paces itself on the loop (``asyncio.sleep``, ``loop.time()``: the SQLite inline
steps' busy wait) runs on it unchanged, and a test asserts how long it took in the loop's own
seconds, the same on a loaded machine as on an idle one. I/O still runs for real: a ready
socket or a thread's result is taken at once, and with no timer pending the loop blocks on
them as usual; only a wait for a timer jumps the clock to that timer.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any


class _VirtualSelector(selectors.SelectSelector):
    """Polls for I/O without waiting when a timer is due; the wait it skipped goes on the clock."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:  # nothing scheduled: wait for I/O for real
            return super().select(None)
        events = super().select(0)
        if not events:
            self.now += timeout
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """``asyncio.SelectorEventLoop`` whose clock moves only by the timers it would have waited for."""

    def __init__(self) -> None:
        self._virtual = _VirtualSelector()
        super().__init__(self._virtual)

    def time(self) -> float:
        return self._virtual.now


def run_virtual(coroutine: Any) -> Any:
    """Run ``coroutine`` to its end on a fresh :class:`VirtualTimeLoop`."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()
