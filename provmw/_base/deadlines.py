"""Time limits on many calls of one loop under one loop timer, cheap enough for every call.

``asyncio.timeout`` schedules a loop timer when a call starts and cancels it when the call
ends: about 3 µs a call, twice a call (the deadline and the attempt's limit), for limits
of seconds or minutes that calls almost never reach. ``Deadlines`` keeps the calls under
way in one ordered dict per limit (the same limit started later ends later, so the first
entry is the next to expire) and one timer at the earliest of them: a call pays an entry
in and out of a dict. When the timer fires it cancels the tasks whose limit has passed,
and each such call turns the cancellation into its own error (``expired()``), taking the
cancellation back as ``asyncio.timeout`` does. A timer that fires early (the call it was
armed for has ended) re-arms at the next entry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["Deadlines"]

T = TypeVar("T")


class _Entry:
    __slots__ = ("deadline", "fired", "task")

    def __init__(self, task: asyncio.Task[object], deadline: float) -> None:
        self.task, self.deadline, self.fired = task, deadline, False


class Deadlines:
    """The limits of one owner (a layer, the manager's attempts); see the module docstring."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._groups: dict[float, dict[_Entry, None]] = {}  # limit_s -> entries, earliest first
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = 0.0

    async def run(self, limit_s: float, call: Awaitable[T], expired: Callable[[], Exception]) -> T:
        """Await ``call`` for at most ``limit_s``; past it, raise ``expired()`` instead. A cancellation
        from elsewhere, or a ``TimeoutError`` raised inside, propagates unchanged."""
        # The running loop from the task, not asked again: on Python 3.11 each asking is a getpid
        # system call (asyncio's fork check), and current_task() asks once already.
        task = asyncio.current_task()
        if task is None or (self._loop is not (loop := task.get_loop()) and not self._bind(loop)):
            async with asyncio.timeout(limit_s):  # another loop holds this owner: the plain way
                return await call
        cancelling = task.cancelling()
        entry = _Entry(task, loop.time() + limit_s)
        group = self._groups.get(limit_s)
        if group is None:
            group = self._groups[limit_s] = {}
        group[entry] = None
        if self._timer is None or entry.deadline < self._armed_at:
            self._arm(entry.deadline)
        try:
            result = await call
        except asyncio.CancelledError:
            if entry.fired and task.uncancel() <= cancelling:
                raise expired() from None
            raise
        finally:
            del group[entry]
            if not group:
                del self._groups[limit_s]
        if entry.fired:  # expired as it returned, and the call swallowed the cancellation: take it back
            task.uncancel()
        return result

    def _bind(self, loop: asyncio.AbstractEventLoop) -> bool:
        if self._groups:
            return False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop = loop
        return True

    def _arm(self, when: float) -> None:
        assert self._loop is not None
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._armed_at = self._loop.call_at(when, self._fire), when

    def _fire(self) -> None:
        assert self._loop is not None
        self._timer = None
        now = self._loop.time()
        upcoming = []
        for group in self._groups.values():
            for entry in group:
                if entry.deadline > now:
                    upcoming.append(entry.deadline)  # the group's next: the rest end later
                    break
                if not entry.fired:
                    entry.fired = True
                    entry.task.cancel()
        if upcoming:
            self._arm(min(upcoming))
