"""A time limit on the waits of a stream, cheap enough to pay once per chunk.

``asyncio.timeout`` schedules and cancels a loop timer at every wait; a stream waits once a
chunk, and the timer would cost more than the rest of a chunk's path. ``WaitLimit`` keeps
one timer for the stream and only moves a deadline at each wait: when the timer fires
early (the deadline moved on) it re-arms itself; when it fires past the deadline while a
wait is under way, it cancels the waiting task, and the waiter turns the cancellation into
its own timeout error. Time spent outside a wait (a slow consumer) is never counted::

    limit = WaitLimit()
    try:
        limit.start(limit.loop_time() + idle_s)
        chunk = await read()
    except asyncio.CancelledError:
        if limit.expired():
            raise ProviderTimeoutError(...) from None
        raise
    finally:
        limit.stop()
"""

from __future__ import annotations

import asyncio

__all__ = ["WaitLimit"]


class WaitLimit:
    """One timer for all the waits of one task; see the module docstring."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._deadline = 0.0
        self._waiting: asyncio.Task[object] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._fired = False

    def loop_time(self) -> float:
        return self._loop.time()

    def start(self, deadline: float) -> None:
        """A wait begins, to end by ``deadline`` (loop time)."""
        self._deadline = deadline
        self._waiting = asyncio.current_task()
        if self._timer is None:
            self._timer = self._loop.call_at(deadline, self._check)

    def stop(self) -> None:
        """The wait ended (or failed)."""
        self._waiting = None

    def expired(self) -> bool:
        """In ``except CancelledError``: whether this limit cancelled the wait (then the
        cancellation is taken back, as ``asyncio.timeout`` does)."""
        if not self._fired:
            return False
        self._fired = False
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return True

    def close(self) -> None:
        """No more waits: drop the timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._waiting is None:
            return  # re-armed by the next wait's start
        if self._loop.time() < self._deadline:
            self._timer = self._loop.call_at(self._deadline, self._check)
            return
        self._fired = True
        self._waiting.cancel()
