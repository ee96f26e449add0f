"""WaitLimit: one timer a stream, cancelling only a wait that runs past its deadline."""

from __future__ import annotations

import asyncio

import pytest

from provmw._base.timers import WaitLimit


async def wait(limit: WaitLimit, seconds: float, limit_s: float) -> str:
    limit.start(limit.loop_time() + limit_s)
    try:
        await asyncio.sleep(seconds)
        return "done"
    except asyncio.CancelledError:
        if limit.expired():
            return "expired"
        raise
    finally:
        limit.stop()


async def test_a_wait_past_its_deadline_is_cancelled_and_taken_back() -> None:
    limit = WaitLimit()
    assert await wait(limit, 1.0, 0.02) == "expired"
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    limit.close()


async def test_time_between_waits_is_never_counted() -> None:
    limit = WaitLimit()
    results = []
    for _ in range(3):
        results.append(await wait(limit, 0.005, 0.03))
        await asyncio.sleep(0.04)  # a slow consumer: longer than the limit, outside any wait
    limit.close()
    assert results == ["done", "done", "done"]


async def test_a_cancellation_from_elsewhere_is_not_mistaken_for_the_limit() -> None:
    limit = WaitLimit()
    task = asyncio.create_task(wait(limit, 1.0, 5.0))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    limit.close()
