"""Deadline (the whole call) and timeout (each attempt): which limit fired, and what it cancels."""

from __future__ import annotations

import asyncio

import pytest

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.errors import AttemptTimeoutError, ConfigurationError, DeadlineExceededError, disposition
from provmw.http import HttpClient
from provmw.middleware.deadline import DeadlineMiddleware, DeadlineOptions
from provmw.middleware.retry import RetryMiddleware
from provmw.middleware.timeout import TimeoutMiddleware
from provmw.responses import CompletionResponse
from provmw.testing import FakeClock, FakeProvider, Fault, ScriptedNext
from tests.conftest import openai_config
from tests.middleware.conftest import CTX, chat_through

CONFIG = ProviderConfig(identifier="p", provider="openai", model="m", timeout_s=0.01)


def controls(**values: object) -> ProviderCallContext:
    return ProviderCallContext(ProviderOperation.CHAT, metadata={"call_options": values})


async def hang(config: ProviderConfig) -> CompletionResponse:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def test_an_attempt_past_the_configurations_timeout_raises_attempt_timeout() -> None:
    with pytest.raises(AttemptTimeoutError) as caught:
        await TimeoutMiddleware().handle(CTX, CONFIG, hang)
    assert caught.value.limit_s == 0.01 and "'p' exceeded its timeout of 0.01s" in str(caught.value)


async def test_an_attempt_timeout_is_retryable_and_may_fall_back() -> None:
    with pytest.raises(AttemptTimeoutError) as caught:
        await TimeoutMiddleware().handle(CTX, CONFIG, hang)
    assert disposition(caught.value).retryable and disposition(caught.value).may_fall_back


async def test_the_attempt_timeout_control_overrides_the_configuration() -> None:
    slow_config = ProviderConfig(identifier="p", provider="openai", model="m", timeout_s=600)
    with pytest.raises(AttemptTimeoutError, match="0.02s"):
        await TimeoutMiddleware().handle(controls(attempt_timeout_s=0.02), slow_config, hang)


async def test_a_fast_attempt_is_untouched() -> None:
    response = await TimeoutMiddleware().handle(CTX, CONFIG, ScriptedNext())
    assert response.text == "ok"


async def test_an_inner_timeout_error_is_not_mistaken_for_ours() -> None:
    with pytest.raises(TimeoutError) as caught:
        await TimeoutMiddleware().handle(CTX, CONFIG, ScriptedNext(TimeoutError("some inner limit")))
    assert not isinstance(caught.value, AttemptTimeoutError)


async def test_each_retry_gets_its_own_attempt_timeout(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(delay_s=5), Fault(delay_s=5))
    clock = FakeClock()
    stack = [RetryMiddleware(sleep=clock.sleep), TimeoutMiddleware()]
    response = await chat_through(stack, http, openai_config(fake, timeout_s=0.2))
    assert response.text == "echo: hi" and fake.count() == 3


async def test_the_deadline_cancels_everything_inside_and_names_its_limit() -> None:
    with pytest.raises(DeadlineExceededError) as caught:
        await DeadlineMiddleware().handle(controls(deadline_s=0.01), CONFIG, hang)
    assert caught.value.limit_s == 0.01 and "deadline of 0.01s for the whole call" in str(caught.value)


async def test_the_deadline_is_neither_retried_nor_a_reason_to_fall_back() -> None:
    assert disposition(DeadlineExceededError(1.0, 1.2)) == disposition(ValueError())


async def test_the_deadline_stops_a_retry_that_is_waiting() -> None:
    slept: list[float] = []

    async def real_sleep(seconds: float) -> None:
        slept.append(seconds)
        await asyncio.Event().wait()  # would wait past any deadline

    stack = RetryMiddleware(sleep=real_sleep)
    inner = ScriptedNext(AttemptTimeoutError("slow", limit_s=1))

    async def retried(config: ProviderConfig) -> CompletionResponse:
        return await stack.handle(CTX, config, inner)

    with pytest.raises(DeadlineExceededError):
        await DeadlineMiddleware().handle(controls(deadline_s=0.02), CONFIG, retried)
    assert len(inner.calls) == 1 and len(slept) == 1


async def test_the_configured_default_deadline_applies_without_a_control() -> None:
    with pytest.raises(DeadlineExceededError):
        await DeadlineMiddleware(DeadlineOptions(default_s=0.01)).handle(CTX, CONFIG, hang)


async def test_without_any_deadline_the_call_passes_through() -> None:
    response = await DeadlineMiddleware().handle(CTX, CONFIG, ScriptedNext())
    assert response.text == "ok"


@pytest.mark.parametrize("value", [0, -1, "5", True, float("nan")])
async def test_a_bad_deadline_control_names_itself(value: object) -> None:
    with pytest.raises(ConfigurationError, match="deadline_s"):
        await DeadlineMiddleware().handle(controls(deadline_s=value), CONFIG, ScriptedNext())
