"""Local rate limits: requests and tokens per minute, concurrency, bounded waits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import attrs
import pytest

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import ConfigurationError, LocalRateLimitError, ProviderUnavailableError
from provmw.middleware.rate_limit import RateLimitMiddleware, RateLimitOptions
from provmw.responses import CompletionResponse, Usage
from provmw.stores.rate_limits import Grant, MemoryRateLimiter, RateLimits
from provmw.testing import FakeClock, ScriptedNext, call_context

CONFIG = ProviderConfig(identifier="p", provider="openai", model="m")


def limiter(clock: FakeClock, max_wait_s: float = 60, **limits: int) -> RateLimitMiddleware:
    options = RateLimitOptions(max_wait_s=max_wait_s, limits={"p": limits})
    return RateLimitMiddleware(options, clock=clock, sleep=clock.sleep)


def ctx(tokens: int = 10, max_output: int | None = None) -> ProviderCallContext:
    return call_context(estimated_input_tokens=tokens, max_output_tokens=max_output)


def answer(total_tokens: int) -> CompletionResponse:
    return CompletionResponse(provider="openai", model="m", usage=Usage(input_tokens=total_tokens))


def held_until(gate: asyncio.Event) -> Callable[[ProviderConfig], Awaitable[CompletionResponse]]:
    """An inner layer that holds its concurrency slot until ``gate`` is set."""

    async def held(config: ProviderConfig) -> CompletionResponse:
        await gate.wait()
        return answer(1)

    return held


async def test_calls_within_the_limits_pass_without_waiting() -> None:
    clock = FakeClock()
    middleware = limiter(clock, requests_per_minute=5)
    for _ in range(5):
        await middleware.handle(ctx(), CONFIG, ScriptedNext())
    assert clock.sleeps == []


async def test_a_call_over_requests_per_minute_waits_for_the_refill() -> None:
    clock = FakeClock()
    middleware = limiter(clock, requests_per_minute=2)
    for _ in range(3):
        await middleware.handle(ctx(), CONFIG, ScriptedNext())
    assert sum(clock.sleeps) == pytest.approx(30.0)


async def test_a_wait_longer_than_allowed_fails_at_once_having_sent_nothing() -> None:
    clock = FakeClock()
    middleware = limiter(clock, max_wait_s=5, requests_per_minute=1)
    await middleware.handle(ctx(), CONFIG, ScriptedNext())
    inner = ScriptedNext()
    with pytest.raises(LocalRateLimitError) as caught:
        await middleware.handle(ctx(), CONFIG, inner)
    assert (caught.value.limit, caught.value.config_id) == ("requests_per_minute", "p")
    assert (inner.calls, clock.sleeps) == ([], [])
    assert "over max_wait_s=5" in str(caught.value)


async def test_tokens_are_estimated_before_and_corrected_after() -> None:
    clock = FakeClock()
    middleware = limiter(clock, tokens_per_minute=1000)
    await middleware.handle(ctx(tokens=100, max_output=500), CONFIG, ScriptedNext(answer(120)))
    await middleware.handle(ctx(tokens=100, max_output=500), CONFIG, ScriptedNext(answer(120)))
    assert clock.sleeps == []  # 600 + 600 estimated, but only 120 + 120 were used


async def test_an_estimate_over_the_tokens_left_waits() -> None:
    clock = FakeClock()
    middleware = limiter(clock, tokens_per_minute=1000)
    await middleware.handle(ctx(tokens=900), CONFIG, ScriptedNext(answer(900)))
    await middleware.handle(ctx(tokens=600), CONFIG, ScriptedNext(answer(600)))
    assert sum(clock.sleeps) == pytest.approx(30.0)


async def test_a_call_larger_than_a_minute_of_tokens_still_goes_once_the_bucket_is_full() -> None:
    clock = FakeClock()
    inner = ScriptedNext()
    await limiter(clock, tokens_per_minute=100).handle(ctx(tokens=5000), CONFIG, inner)
    assert len(inner.calls) == 1


async def test_a_failed_call_gives_its_tokens_back() -> None:
    clock = FakeClock()
    middleware = limiter(clock, tokens_per_minute=1000)
    with pytest.raises(ProviderUnavailableError):
        await middleware.handle(ctx(tokens=900), CONFIG, ScriptedNext(ProviderUnavailableError("down")))
    await middleware.handle(ctx(tokens=900), CONFIG, ScriptedNext())
    assert clock.sleeps == []


async def test_concurrency_over_the_limit_is_refused_without_waiting_room() -> None:
    clock = FakeClock()
    middleware = limiter(clock, max_wait_s=0, max_concurrency=2)
    gate = asyncio.Event()

    held = held_until(gate)

    running = [asyncio.create_task(middleware.handle(ctx(), CONFIG, held)) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(LocalRateLimitError, match="max_concurrency"):
        await middleware.handle(ctx(), CONFIG, ScriptedNext())
    gate.set()
    await asyncio.gather(*running)


async def test_a_waiting_call_goes_when_a_slot_frees() -> None:
    clock = FakeClock()
    middleware = limiter(clock, max_wait_s=10, max_concurrency=1)
    gate = asyncio.Event()

    held = held_until(gate)

    first = asyncio.create_task(middleware.handle(ctx(), CONFIG, held))
    await asyncio.sleep(0)
    second = asyncio.create_task(middleware.handle(ctx(), CONFIG, ScriptedNext()))
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, second)
    assert clock.sleeps and sum(clock.sleeps) < 10


async def test_configurations_without_limits_pass_through() -> None:
    clock = FakeClock()
    middleware = limiter(clock, requests_per_minute=1)
    other = ProviderConfig(identifier="q", provider="openai", model="m")
    for _ in range(10):
        await middleware.handle(ctx(), other, ScriptedNext())
    assert clock.sleeps == []


async def test_the_star_entry_limits_every_other_configuration() -> None:
    clock = FakeClock()
    options = RateLimitOptions(max_wait_s=0, limits={"*": {"requests_per_minute": 1}})
    middleware = RateLimitMiddleware(options, clock=clock, sleep=clock.sleep)
    await middleware.handle(ctx(), CONFIG, ScriptedNext())
    with pytest.raises(LocalRateLimitError):
        await middleware.handle(ctx(), CONFIG, ScriptedNext())


@pytest.mark.parametrize(("limits", "name"), [({"requests_per_minute": 0}, "requests_per_minute"),
                                             ({"max_concurrency": 1.5}, "max_concurrency")])
def test_bad_limits_are_configuration_errors_naming_the_key(limits: dict[str, object], name: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        RateLimits(**limits)  # type: ignore[arg-type]


async def test_release_hands_back_the_permit_its_grant_carried() -> None:
    class Recording(MemoryRateLimiter):
        def __init__(self) -> None:
            super().__init__()
            self.released: list[str] = []

        async def acquire(self, key: str, limits: RateLimits, tokens: int, now: float) -> Grant:
            return attrs.evolve(await super().acquire(key, limits, tokens, now), permit="p-1")

        async def release(self, key: str, limits: RateLimits, *, permit: str, reserved: int, used: int,
                          now: float) -> None:
            self.released.append(permit)

    recording = Recording()
    middleware = RateLimitMiddleware(RateLimitOptions(limits={"p": {"max_concurrency": 1}}), limiter=recording)
    await middleware.handle(ctx(), CONFIG, ScriptedNext(answer(5)))
    assert recording.released == ["p-1"]
