"""Circuit breaker: when it opens, how it probes, and what it counts."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.config import ProviderConfig
from provmw.errors import (
    AuthenticationError,
    CircuitOpenError,
    ConfigurationError,
    InvalidRequestError,
    ProviderError,
    ProviderUnavailableError,
    RateLimitError,
)
from provmw.middleware._common import endpoint_key
from provmw.middleware.circuit_breaker import CircuitBreakerMiddleware
from provmw.responses import CompletionResponse
from provmw.stores.breakers import BreakerPolicy, BreakerState, MemoryBreakerStore
from provmw.testing import FakeClock, ScriptedNext
from tests.middleware.conftest import CTX

CONFIG = ProviderConfig(identifier="p", provider="openai", model="m", base_url="https://api.test/v1")
DOWN = ProviderUnavailableError("down", status=503)
OK = CompletionResponse(provider="openai", model="m", text="ok")


def breaker(clock: FakeClock, **policy: object) -> CircuitBreakerMiddleware:
    return CircuitBreakerMiddleware(BreakerPolicy(**policy), clock=clock)  # type: ignore[arg-type]


def state(middleware: CircuitBreakerMiddleware, config: ProviderConfig = CONFIG) -> BreakerState:
    assert isinstance(middleware.store, MemoryBreakerStore)
    return middleware.store.state(endpoint_key(config))


async def feed(middleware: CircuitBreakerMiddleware, *outcomes: bool, config: ProviderConfig = CONFIG) -> None:
    """Run one call per outcome: True fails with a 503, False succeeds."""
    for failed in outcomes:
        with contextlib.suppress(ProviderUnavailableError, CircuitOpenError):
            await middleware.handle(CTX, config, ScriptedNext(DOWN) if failed else ScriptedNext())


async def open_breaker(clock: FakeClock, **policy: object) -> CircuitBreakerMiddleware:
    middleware = breaker(clock, window_size=4, min_calls=4, open_s=10, **policy)
    await feed(middleware, True, True, True, True)
    assert state(middleware) is BreakerState.OPEN
    return middleware


async def test_stays_closed_below_the_minimum_number_of_calls() -> None:
    middleware = breaker(FakeClock(), window_size=20, min_calls=10)
    await feed(middleware, *[True] * 9)
    assert state(middleware) is BreakerState.CLOSED


async def test_opens_exactly_when_the_failure_rate_reaches_the_threshold() -> None:
    middleware = breaker(FakeClock(), window_size=10, min_calls=10, failure_rate=0.5)
    await feed(middleware, *[False] * 5, *[True] * 4)
    assert state(middleware) is BreakerState.CLOSED
    await feed(middleware, True)
    assert state(middleware) is BreakerState.OPEN


@given(outcomes=st.lists(st.booleans(), max_size=60), window=st.integers(1, 12),
       rate=st.sampled_from([0.1, 0.3, 0.5, 1.0]))
async def test_opens_at_the_first_call_where_the_window_crosses_the_threshold(
        outcomes: list[bool], window: int, rate: float) -> None:
    middleware = breaker(FakeClock(), window_size=window, min_calls=window, failure_rate=rate)
    expected = next((i for i in range(window - 1, len(outcomes))
                     if sum(outcomes[i - window + 1:i + 1]) / window >= rate), None)
    for i, failed in enumerate(outcomes):
        await feed(middleware, failed)
        assert (state(middleware) is BreakerState.OPEN) == (expected is not None and i >= expected)


async def test_an_open_breaker_rejects_at_once_with_retry_after() -> None:
    clock = FakeClock()
    middleware = await open_breaker(clock)
    clock.advance(4)
    inner = ScriptedNext()
    with pytest.raises(CircuitOpenError) as caught:
        await middleware.handle(CTX, CONFIG, inner)
    assert inner.calls == [] and caught.value.retry_after_s == pytest.approx(6)
    assert caught.value.breaker == endpoint_key(CONFIG)


async def test_exactly_n_half_open_probes_out_of_a_thousand_concurrent_calls() -> None:
    clock = FakeClock()
    middleware = await open_breaker(clock, half_open_probes=3)
    clock.advance(10)
    gate, entered = asyncio.Event(), []

    async def slow_success(config: ProviderConfig) -> CompletionResponse:
        entered.append(config)
        await gate.wait()
        return OK

    calls = [asyncio.create_task(middleware.handle(CTX, CONFIG, slow_success)) for _ in range(1000)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert len(entered) == 3
    assert sum(isinstance(r, CircuitOpenError) for r in results) == 997
    assert state(middleware) is BreakerState.CLOSED


async def test_a_failed_probe_reopens_the_breaker() -> None:
    clock = FakeClock()
    middleware = await open_breaker(clock, half_open_probes=2)
    clock.advance(10)
    await feed(middleware, False, True)
    assert state(middleware) is BreakerState.OPEN


async def test_a_cancelled_probe_gives_its_permit_back() -> None:
    clock = FakeClock()
    middleware = await open_breaker(clock, half_open_probes=1)
    clock.advance(10)
    probe = asyncio.create_task(middleware.handle(CTX, CONFIG, _forever))
    await asyncio.sleep(0)
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    inner = ScriptedNext()
    await middleware.handle(CTX, CONFIG, inner)
    assert len(inner.calls) == 1 and state(middleware) is BreakerState.CLOSED


async def test_an_ignored_error_gives_its_permit_back_and_is_not_counted() -> None:
    clock = FakeClock()
    middleware = await open_breaker(clock, half_open_probes=1)
    clock.advance(10)
    with pytest.raises(InvalidRequestError):
        await middleware.handle(CTX, CONFIG, ScriptedNext(InvalidRequestError("bad", status=400)))
    assert state(middleware) is BreakerState.HALF_OPEN
    await feed(middleware, False)
    assert state(middleware) is BreakerState.CLOSED


async def test_caller_errors_never_open_the_breaker() -> None:
    middleware = breaker(FakeClock(), window_size=4, min_calls=4)
    for _ in range(10):
        with pytest.raises(InvalidRequestError):
            await middleware.handle(CTX, CONFIG, ScriptedNext(InvalidRequestError("bad", status=400)))
    assert state(middleware) is BreakerState.CLOSED


async def test_breakers_are_isolated_per_model() -> None:
    clock = FakeClock()
    middleware = await open_breaker(clock)
    other = ProviderConfig(identifier="q", provider="openai", model="other", base_url="https://api.test/v1")
    inner = ScriptedNext()
    await middleware.handle(CTX, other, inner)
    assert len(inner.calls) == 1 and state(middleware, other) is BreakerState.CLOSED


async def test_a_result_from_before_the_breaker_opened_is_ignored() -> None:
    clock = FakeClock()
    middleware = breaker(clock, window_size=2, min_calls=2, half_open_probes=1, open_s=10)
    gate = asyncio.Event()

    async def late(config: ProviderConfig) -> CompletionResponse:
        await gate.wait()
        return OK

    straggler = asyncio.create_task(middleware.handle(CTX, CONFIG, late))
    await asyncio.sleep(0)
    await feed(middleware, True, True)
    clock.advance(10)
    probe = asyncio.create_task(middleware.handle(CTX, CONFIG, _forever))
    await asyncio.sleep(0)
    gate.set()
    await straggler
    assert state(middleware) is BreakerState.HALF_OPEN
    probe.cancel()


async def test_slow_calls_open_the_breaker_when_configured() -> None:
    clock = FakeClock()
    middleware = breaker(clock, window_size=4, min_calls=4, slow_call_s=2.0, slow_call_rate=0.5)

    async def slow(config: ProviderConfig) -> CompletionResponse:
        clock.advance(3)
        return OK

    for _ in range(2):
        await middleware.handle(CTX, CONFIG, slow)
    await feed(middleware, False, False)
    assert state(middleware) is BreakerState.OPEN


async def test_each_transition_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="provmw.middleware.circuit_breaker")
    clock = FakeClock()
    middleware = await open_breaker(clock, half_open_probes=1)
    await asyncio.gather(*(feed(middleware, True) for _ in range(100)), return_exceptions=True)
    clock.advance(10)
    await asyncio.gather(*(feed(middleware, False) for _ in range(100)), return_exceptions=True)
    lines = [r.getMessage() for r in caplog.records]
    key = endpoint_key(CONFIG)
    assert lines == [f"circuit {key}: closed -> open", f"circuit {key}: open -> half_open",
                     f"circuit {key}: half_open -> closed"]


def test_the_breaker_key_drops_credentials_and_query() -> None:
    config = ProviderConfig(identifier="p", provider="openai", model="m",
                            base_url="https://user:pw@api.test:8443/v1?key=sk-secret")
    assert endpoint_key(config).startswith("openai|https://api.test:8443/v1|m|")
    assert "pw" not in endpoint_key(config) and "sk-secret" not in endpoint_key(config)


async def test_one_accounts_failures_never_open_the_breaker_for_another_account() -> None:
    middleware = await open_breaker(FakeClock())
    other = attrs.evolve(CONFIG, api_key="sk-other-account")
    assert state(middleware, other) is BreakerState.CLOSED
    assert (await middleware.handle(CTX, other, ScriptedNext())).text == "ok"


@pytest.mark.parametrize("error", [RateLimitError("no credit", status=429, code="insufficient_quota"),
                                   AuthenticationError("bad key", status=401),
                                   AuthenticationError("forbidden", status=403)], ids=["quota", "401", "403"])
async def test_errors_about_the_account_are_not_endpoint_failures(error: ProviderError) -> None:
    middleware = breaker(FakeClock(), window_size=4, min_calls=4)
    for _ in range(8):
        with contextlib.suppress(ProviderError):
            await middleware.handle(CTX, CONFIG, ScriptedNext(error))
    assert state(middleware) is BreakerState.CLOSED


@pytest.mark.parametrize(("key", "value"), [("failure_rate", 0), ("failure_rate", 1.5), ("window_size", 0),
                                            ("open_s", -1), ("half_open_probes", 2.5)])
def test_bad_policies_are_configuration_errors_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=key):
        BreakerPolicy(**{key: value})  # type: ignore[arg-type]


def test_min_calls_above_the_window_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="min_calls"):
        BreakerPolicy(window_size=5, min_calls=6)


async def _forever(config: ProviderConfig) -> CompletionResponse:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")

