"""Shared rate limits: requests, tokens and concurrency are counted across handles (processes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from provmw_redis import RedisState

from provmw.stores.rate_limits import RateLimits

from conftest import state_settings

pytestmark = pytest.mark.redis


@pytest.fixture
async def other(prefix: str) -> AsyncIterator[RedisState]:
    backend = RedisState(state_settings(prefix))
    yield backend
    await backend.aclose()


async def test_requests_per_minute_are_counted_across_handles(state: RedisState, other: RedisState) -> None:
    limits = RateLimits(requests_per_minute=2)
    grants = [await s.rate_limiter().acquire("k", limits, 0, 0) for s in (state, other, state)]
    assert [g.admitted for g in grants] == [True, True, False]
    assert grants[2].limit == "requests_per_minute" and 0 < grants[2].wait_s <= 30


async def test_tokens_are_corrected_to_what_was_used(state: RedisState, other: RedisState) -> None:
    limits = RateLimits(tokens_per_minute=1000)
    grant = await state.rate_limiter().acquire("k", limits, 900, 0)
    assert not (await other.rate_limiter().acquire("k", limits, 500, 0)).admitted
    await state.rate_limiter().release("k", limits, permit=grant.permit, reserved=900, used=100, now=0)
    assert (await other.rate_limiter().acquire("k", limits, 500, 0)).admitted


async def test_concurrency_is_counted_across_handles(state: RedisState, other: RedisState) -> None:
    limits = RateLimits(max_concurrency=1)
    grant = await state.rate_limiter().acquire("k", limits, 0, 0)
    refused = await other.rate_limiter().acquire("k", limits, 0, 0)
    assert not refused.admitted and refused.limit == "max_concurrency"
    await state.rate_limiter().release("k", limits, permit=grant.permit, reserved=0, used=0, now=0)
    assert (await other.rate_limiter().acquire("k", limits, 0, 0)).admitted


async def test_a_slot_held_by_a_dead_process_frees_after_its_lease(prefix: str) -> None:
    short = RedisState(state_settings(prefix, slot_lease_s=0.1))
    limits = RateLimits(max_concurrency=1)
    assert (await short.rate_limiter().acquire("k", limits, 0, 0)).admitted  # never released
    assert not (await short.rate_limiter().acquire("k", limits, 0, 0)).admitted
    await asyncio.sleep(0.15)
    assert (await short.rate_limiter().acquire("k", limits, 0, 0)).admitted
    await short.aclose()
