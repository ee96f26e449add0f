"""Retry: what is retried, how often, how long it waits, and the retry budget."""

from __future__ import annotations

import email.utils
import random
import statistics
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError, ProviderError, ProviderUnavailableError, RateLimitError
from provmw.http import HttpClient
from provmw.middleware.fallback import FallbackMiddleware
from provmw.middleware.retry import RetryBudget, RetryMiddleware, RetryOptions, full_jitter
from provmw.testing import FakeClock, FakeProvider, Fault, ScriptedNext, call_context
from tests.conftest import anthropic_config, openai_config
from tests.middleware.conftest import CTX, chat_through

RETRYABLE = [408, 409, 429, 500, 502, 503, 504, 529]
NOT_RETRYABLE = [400, 401, 403, 404, 413, 422]


def retry(clock: FakeClock, **options: object) -> RetryMiddleware:
    return RetryMiddleware(RetryOptions(**options), sleep=clock.sleep, rng=random.Random(7))  # type: ignore[arg-type]


@pytest.mark.parametrize("status", RETRYABLE)
async def test_a_retryable_status_is_attempted_max_attempts_times(
        fake: FakeProvider, http: HttpClient, status: int) -> None:
    fake.script(*[Fault(status=status)] * 3)
    clock = FakeClock()
    with pytest.raises(ProviderError) as caught:
        await chat_through([retry(clock)], http, openai_config(fake))
    assert (caught.value.status, fake.count(), len(clock.sleeps)) == (status, 3, 2)


@pytest.mark.parametrize("status", NOT_RETRYABLE)
async def test_a_non_retryable_status_is_attempted_once_without_sleeping(
        fake: FakeProvider, http: HttpClient, status: int) -> None:
    fake.script(Fault(status=status))
    clock = FakeClock()
    with pytest.raises(ProviderError):
        await chat_through([retry(clock)], http, openai_config(fake))
    assert (fake.count(), clock.sleeps) == (1, [])


@pytest.mark.parametrize(("fault", "attempts"), [
    (Fault(status=429, code="insufficient_quota"), 1),
    (Fault(status=400, code="content_policy_violation"), 1),
    (Fault(status=400, code="context_length_exceeded"), 1),
    (Fault(status=503, headers={"x-should-retry": "false"}), 1),
    (Fault(status=400, headers={"x-should-retry": "true"}), 3),
    (Fault(drop_connection=True), 3),
    (Fault(malformed_json=True), 3),
], ids=["quota", "content-policy", "context-length", "should-retry-false", "should-retry-true",
        "connection-dropped", "malformed-body"])
async def test_error_table_attempt_counts(fake: FakeProvider, http: HttpClient, fault: Fault, attempts: int) -> None:
    fake.script(*[fault] * 3)
    clock = FakeClock()
    with pytest.raises(ProviderError):
        await chat_through([retry(clock)], http, openai_config(fake))
    assert (fake.count(), len(clock.sleeps)) == (attempts, attempts - 1)


async def test_success_after_transient_failures_returns_the_answer(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=503), Fault(status=502))
    response = await chat_through([retry(FakeClock())], http, openai_config(fake))
    assert response.text == "echo: hi" and fake.count() == 3


@pytest.mark.parametrize(("headers", "expected_s"), [
    ({"retry-after-ms": "250"}, 0.25),
    ({"retry-after": "3"}, 3.0),
    ({"retry-after": "1.5", "retry-after-ms": "700"}, 0.7),
])
async def test_the_wait_follows_the_server_hint(
        fake: FakeProvider, http: HttpClient, headers: dict[str, str], expected_s: float) -> None:
    fake.script(Fault(status=429, headers=headers))
    clock = FakeClock()
    await chat_through([retry(clock)], http, openai_config(fake))
    assert clock.sleeps == [pytest.approx(expected_s, rel=0.1)]


async def test_an_http_date_hint_is_honoured_within_ten_percent(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=503, headers={"retry-after": email.utils.formatdate(time.time() + 30, usegmt=True)}))
    clock = FakeClock()
    await chat_through([retry(clock, max_wait_s=60)], http, openai_config(fake))
    assert clock.sleeps == [pytest.approx(30, rel=0.1)]


@pytest.mark.parametrize("hint", ["banana", "-5", "nan", "inf", ""])
async def test_a_malformed_hint_falls_back_to_backoff(fake: FakeProvider, http: HttpClient, hint: str) -> None:
    fake.script(Fault(status=503, headers={"retry-after": hint}))
    clock = FakeClock()
    await chat_through([retry(clock, base_s=0.5)], http, openai_config(fake))
    assert len(clock.sleeps) == 1 and 0 <= clock.sleeps[0] <= 0.5


async def test_a_hint_over_the_cap_is_not_retried_and_the_fallback_answers_at_once(
        fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=429, headers={"retry-after": "120"}), model="gpt-test")
    primary, backup = openai_config(fake, fallbacks=("an",)), anthropic_config(fake)
    clock = FakeClock()
    stack = [FallbackMiddleware({"oa": primary, "an": backup}), retry(clock, max_wait_s=8)]
    response = await chat_through(stack, http, primary)
    assert (response.served_by, fake.count(model="gpt-test"), clock.sleeps) == ("an", 1, [])


async def test_a_hint_over_the_cap_without_fallback_raises_with_the_hint() -> None:
    clock = FakeClock()
    inner = ScriptedNext(RateLimitError("slow down", retry_after_s=60.0))
    with pytest.raises(RateLimitError) as caught:
        await retry(clock, max_wait_s=8).handle(CTX, _config(), inner)
    assert (caught.value.retry_after_s, len(inner.calls), clock.sleeps) == (60.0, 1, [])


async def test_backoff_grows_and_is_capped_per_wait() -> None:
    clock = FakeClock()
    inner = ScriptedNext(*[ProviderUnavailableError("down")] * 9)
    await retry(clock, max_attempts=10, base_s=1, max_wait_s=4).handle(CTX, _config(), inner)
    bounds = [min(4.0, 2.0 ** n) for n in range(9)]
    assert all(0 <= wait <= bound for wait, bound in zip(clock.sleeps, bounds, strict=True))


async def test_the_max_attempts_control_overrides_the_setting() -> None:
    ctx = call_context(controls={"max_attempts": 1})
    inner = ScriptedNext(ProviderUnavailableError("down"))
    with pytest.raises(ProviderUnavailableError):
        await retry(FakeClock()).handle(ctx, _config(), inner)
    assert len(inner.calls) == 1


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "3"])
async def test_a_bad_max_attempts_control_names_itself(value: object) -> None:
    ctx = call_context(controls={"max_attempts": value})
    with pytest.raises(ConfigurationError, match="max_attempts"):
        await retry(FakeClock()).handle(ctx, _config(), ScriptedNext())


@pytest.mark.parametrize(("key", "value"), [("max_attempts", 0), ("base_s", -1), ("budget_share", 1.5),
                                            ("max_wait_s", "8")])
def test_bad_options_are_configuration_errors_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=key):
        RetryOptions(**{key: value})  # type: ignore[arg-type]


def test_ten_thousand_jittered_waits_stay_in_bounds_and_spread_out() -> None:
    rng = random.Random(2026)
    waits = [full_jitter(4, 0.5, 8.0, rng) for _ in range(10_000)]
    assert all(0 <= w <= 4.0 for w in waits)
    deciles = [sum(1 for w in waits if i * 0.4 <= w < (i + 1) * 0.4) for i in range(10)]
    assert min(deciles) > 800 and max(deciles) < 1200  # uniform: about 1,000 each
    assert statistics.pstdev(waits) == pytest.approx(4.0 / 12 ** 0.5, rel=0.05)


@given(attempt=st.integers(1, 60), base=st.floats(0.001, 10), cap=st.floats(0.001, 100), seed=st.integers())
def test_every_jittered_wait_is_within_its_cap(attempt: int, base: float, cap: float, seed: int) -> None:
    wait = full_jitter(attempt, base, cap, random.Random(seed))
    assert 0 <= wait <= min(cap, base * 2.0 ** (attempt - 1))


def test_a_huge_attempt_number_does_not_overflow() -> None:
    assert 0 <= full_jitter(100_000, 1.0, 5.0, random.Random(1)) <= 5.0


@given(events=st.lists(st.booleans(), max_size=500), share=st.floats(0, 1), initial=st.integers(0, 20))
def test_the_budget_never_grants_more_than_its_share_plus_the_initial_tokens(
        events: list[bool], share: float, initial: int) -> None:
    budget, granted = RetryBudget(share, initial, 100), 0
    for is_first_attempt in events:
        if is_first_attempt:
            budget.deposit()
        else:
            granted += budget.withdraw()
    assert granted <= initial + share * sum(events) + 1e-9


@given(events=st.lists(st.booleans(), max_size=300), share=st.floats(0, 1), initial=st.integers(0, 20),
       maximum=st.integers(0, 10))
def test_the_budget_never_holds_more_than_its_maximum(events: list[bool], share: float, initial: int,
                                                      maximum: int) -> None:
    budget = RetryBudget(share, initial, maximum)
    for is_first_attempt in events:
        budget.deposit() if is_first_attempt else budget.withdraw()
    burst = 0
    while budget.withdraw():  # what it grants in a row, with no call offered meanwhile
        burst += 1
    assert burst <= maximum


def test_a_budget_saturated_by_deposits_grants_exactly_its_maximum() -> None:
    budget = RetryBudget(0.5, 0, 3)
    for _ in range(100):
        budget.deposit()
    assert [budget.withdraw() for _ in range(4)] == [True, True, True, False]


async def test_a_spent_budget_stops_retrying_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    middleware = RetryMiddleware(RetryOptions(budget_initial=1, budget_share=0), sleep=FakeClock().sleep)
    inner = ScriptedNext(*[ProviderUnavailableError("down")] * 10)
    for _ in range(3):
        with pytest.raises(ProviderUnavailableError):
            await middleware.handle(CTX, _config(), inner)
    assert len(inner.calls) == 2 + 1 + 1
    assert caplog.text.count("retry budget is spent") == 1


async def test_budgets_are_per_configuration() -> None:
    middleware = RetryMiddleware(RetryOptions(budget_initial=1, budget_share=0), sleep=FakeClock().sleep)
    for identifier in ("a", "b"):
        inner = ScriptedNext(ProviderUnavailableError("down"))
        await middleware.handle(CTX, _config(identifier), inner)
        assert len(inner.calls) == 2


def _config(identifier: str = "p") -> ProviderConfig:
    return ProviderConfig(identifier=identifier, provider="openai", model="m")
