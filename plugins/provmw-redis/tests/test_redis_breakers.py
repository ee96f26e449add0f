"""Shared breakers: two handles on one Redis (two processes, in effect) see one breaker, with the
core state machine's semantics, probes limited across both."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from provmw_redis import RedisState

from provmw.stores.breakers import Admission, BreakerPolicy, BreakerState, Transition

from conftest import state_settings

pytestmark = pytest.mark.redis

POLICY = BreakerPolicy(window_size=4, min_calls=2, failure_rate=0.5, open_s=0.2, half_open_probes=2)


@pytest.fixture
async def other(prefix: str) -> AsyncIterator[RedisState]:
    backend = RedisState(state_settings(prefix))
    yield backend
    await backend.aclose()


async def fail(state: RedisState, times: int) -> Transition | None:
    store, last = state.breaker_store(), None
    for _ in range(times):
        admission = await store.admit("k", POLICY, 0)
        last = await store.record("k", admission, POLICY, failed=True, slow=False, now=0) or last
    return last


async def test_failures_in_one_handle_open_the_breaker_in_another(state: RedisState, other: RedisState) -> None:
    assert await fail(state, 2) == Transition("k", BreakerState.CLOSED, BreakerState.OPEN)
    refused = await other.breaker_store().admit("k", POLICY, 0)
    assert not refused.admitted and 0 < refused.retry_after_s <= POLICY.open_s


async def test_a_half_open_breaker_admits_exactly_its_probes_across_handles(state: RedisState,
                                                                          other: RedisState) -> None:
    await fail(state, 2)
    await asyncio.sleep(POLICY.open_s)
    stores = [state.breaker_store(), other.breaker_store()] * 3
    admissions = [await store.admit("k", POLICY, 0) for store in stores]
    assert [a.admitted for a in admissions] == [True, True, False, False, False, False]
    assert admissions[0].transition == Transition("k", BreakerState.OPEN, BreakerState.HALF_OPEN)


async def test_passing_probes_close_the_breaker(state: RedisState, other: RedisState) -> None:
    await fail(state, 2)
    await asyncio.sleep(POLICY.open_s)
    first, second = await state.breaker_store().admit("k", POLICY, 0), await other.breaker_store().admit("k", POLICY, 0)
    assert await state.breaker_store().record("k", first, POLICY, failed=False, slow=False, now=0) is None
    closed = await other.breaker_store().record("k", second, POLICY, failed=False, slow=False, now=0)
    assert closed == Transition("k", BreakerState.HALF_OPEN, BreakerState.CLOSED)


async def test_a_result_from_before_the_breaker_opened_is_ignored(state: RedisState) -> None:
    store = state.breaker_store()
    slow_call = await store.admit("k", POLICY, 0)
    await fail(state, 2)
    await asyncio.sleep(POLICY.open_s)
    probe = await store.admit("k", POLICY, 0)
    assert await store.record("k", slow_call, POLICY, failed=False, slow=False, now=0) is None
    assert probe.generation != slow_call.generation


async def test_probes_whose_process_died_are_given_up_after_their_lease(prefix: str) -> None:
    short = RedisState(state_settings(prefix, probe_lease_s=0.1))
    store = short.breaker_store()
    await fail(short, 2)
    await asyncio.sleep(POLICY.open_s)
    for _ in range(2):
        assert (await store.admit("k", POLICY, 0)).admitted  # probes that will never report
    assert not (await store.admit("k", POLICY, 0)).admitted
    await asyncio.sleep(0.1)
    assert (await store.admit("k", POLICY, 0)).probe
    await short.aclose()


async def test_a_slow_probe_is_not_presumed_dead_within_its_lease(state: RedisState) -> None:
    store = state.breaker_store()
    await fail(state, 2)
    await asyncio.sleep(POLICY.open_s)
    for _ in range(2):
        await store.admit("k", POLICY, 0)
    await asyncio.sleep(POLICY.open_s)  # a whole open period: still within the 120 s lease
    assert not (await store.admit("k", POLICY, 0)).admitted


async def test_a_released_probe_frees_its_permit(state: RedisState) -> None:
    store = state.breaker_store()
    await fail(state, 2)
    await asyncio.sleep(POLICY.open_s)
    probes: list[Admission] = [await store.admit("k", POLICY, 0) for _ in range(2)]
    await store.release("k", probes[0])
    assert (await store.admit("k", POLICY, 0)).admitted
