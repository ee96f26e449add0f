"""Deadline (the whole call) and each attempt's limit: which one fired, what it cancels, who may change it."""

from __future__ import annotations

import asyncio

import pytest

from provmw._base.deadlines import Deadlines
from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import AttemptTimeoutError, ConfigurationError, DeadlineExceededError, disposition
from provmw.manager import ServiceManager
from provmw.middleware.deadline import DeadlineMiddleware, DeadlineOptions
from provmw.middleware.retry import RetryMiddleware
from provmw.middleware.timeout import TimeoutMiddleware
from provmw.plugins import PluginHost
from provmw.responses import CompletionResponse
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault, ScriptedNext, call_context
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, openai_config
from tests.middleware.conftest import CTX

CONFIG = ProviderConfig(identifier="p", provider="openai", model="m", timeout_s=0.01)


def controls(**values: object) -> ProviderCallContext:
    return call_context(controls=values)


async def hang(config: ProviderConfig) -> CompletionResponse:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def manager(fake: FakeProvider, host: PluginHost, *enabled: str, **fields: object) -> ServiceManager:
    off = {name: section for name, section in BUILTIN_MIDDLEWARE_OFF.items() if name not in enabled}
    return ServiceManager(Settings(configurations={"oa": openai_config(fake, **fields)}, middleware=off), host=host)


async def test_a_timed_out_attempt_is_an_attempt_timeout_naming_its_limit(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.script(Fault(delay_s=5))
    async with manager(fake, builtin_only, timeout_s=0.2) as m:
        with pytest.raises(AttemptTimeoutError) as caught:
            await m.chat("hi")
    assert caught.value.limit_s == 0.2 and "'oa' exceeded its timeout of 0.2s" in str(caught.value)


async def test_a_timed_out_attempt_is_recorded_as_a_timeout(fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.script(Fault(delay_s=5))
    async with manager(fake, builtin_only, "retry", timeout_s=0.2) as m:
        response = await m.chat("hi")
    assert [a.error_type for a in response.attempts] == ["AttemptTimeoutError", None]


async def test_the_control_lengthens_an_attempt_past_the_configuration(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.script(Fault(delay_s=0.3))
    async with manager(fake, builtin_only, "timeout", timeout_s=0.1) as m:
        response = await m.chat("hi", controls={"attempt_timeout_s": 5})
    assert response.text == "echo: hi"


async def test_the_control_shortens_an_attempt(fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.script(Fault(delay_s=5))
    async with manager(fake, builtin_only, "timeout", timeout_s=30) as m:
        with pytest.raises(AttemptTimeoutError) as caught:
            await m.chat("hi", controls={"attempt_timeout_s": 0.1})
    assert caught.value.limit_s == 0.1


async def test_an_attempt_timeout_is_retryable_and_may_fall_back() -> None:
    error = AttemptTimeoutError("slow", limit_s=1)
    assert disposition(error).retryable and disposition(error).may_fall_back


async def test_without_the_control_the_configuration_passes_unchanged() -> None:
    inner = ScriptedNext()
    await TimeoutMiddleware().handle(CTX, CONFIG, inner)
    assert inner.calls == [CONFIG]


async def test_an_inner_timeout_error_is_not_mistaken_for_the_limits_own() -> None:
    async def inner_limit() -> None:
        raise TimeoutError("some inner limit")

    with pytest.raises(TimeoutError) as caught:
        await Deadlines().run(5, inner_limit(), lambda: AttemptTimeoutError("mine", limit_s=5))
    assert not isinstance(caught.value, AttemptTimeoutError)


async def test_each_retry_gets_its_own_attempt_timeout(fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.script(Fault(delay_s=5), Fault(delay_s=5))
    async with manager(fake, builtin_only, "retry", timeout_s=0.2) as m:
        response = await m.chat("hi")
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
    response = await DeadlineMiddleware(DeadlineOptions(default_s=None)).handle(CTX, CONFIG, ScriptedNext())
    assert response.text == "ok"


@pytest.mark.parametrize("value", [0, -1, "5", True, float("nan")])
async def test_a_bad_deadline_control_names_itself(value: object) -> None:
    with pytest.raises(ConfigurationError, match="deadline_s"):
        await DeadlineMiddleware().handle(controls(deadline_s=value), CONFIG, ScriptedNext())
