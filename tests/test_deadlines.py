"""Deadlines: many calls' limits under one loop timer; each call that runs past its own fails with its own error."""

from __future__ import annotations

import asyncio

import pytest

from provmw._base.deadlines import Deadlines


class Late(Exception):
    pass


async def sleeps(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


async def test_a_call_within_its_limit_returns_and_leaves_no_cancellation() -> None:
    assert await Deadlines().run(5, sleeps(0), Late) == "done"
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_call_past_its_limit_raises_the_owners_error_and_the_cancellation_is_taken_back() -> None:
    with pytest.raises(Late):
        await Deadlines().run(0.02, sleeps(5), Late)
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_later_call_still_expires_after_an_earlier_one_ended_before_the_timer() -> None:
    limits = Deadlines()
    assert await limits.run(0.05, sleeps(0), Late) == "done"  # the timer stays armed for this one
    with pytest.raises(Late):
        await limits.run(0.05, sleeps(5), Late)


async def test_only_the_calls_past_their_own_limit_are_cancelled() -> None:
    limits = Deadlines()
    short = asyncio.ensure_future(limits.run(0.02, sleeps(5), Late))
    long = asyncio.ensure_future(limits.run(5, sleeps(0.1), Late))
    with pytest.raises(Late):
        await short
    assert await long == "done"


async def test_nested_limits_each_raise_their_own_error() -> None:
    class Outer(Exception):
        pass

    outer, inner = Deadlines(), Deadlines()
    with pytest.raises(Late):
        await outer.run(5, inner.run(0.02, sleeps(5), Late), Outer)
    with pytest.raises(Outer):
        await outer.run(0.02, inner.run(5, sleeps(5), Late), Outer)


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    task = asyncio.ensure_future(Deadlines().run(5, sleeps(5), Late))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_an_owner_moves_to_a_new_loop_once_its_calls_on_the_old_one_are_over() -> None:
    limits = Deadlines()
    for _ in range(2):
        with pytest.raises(Late):
            asyncio.run(limits.run(0.02, sleeps(5), Late))
