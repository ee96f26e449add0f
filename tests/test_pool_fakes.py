"""What the pool tests stand on: the fake provider's per-model request limit and prompt cache."""

from __future__ import annotations

import pytest

from provmw.errors import RateLimitError
from provmw.manager import ServiceManager
from provmw.messages import Message
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeClock, FakeProvider
from tests.conftest import anthropic_config, openai_config

NO_RETRY = {"retry": {"max_attempts": 1}}


def one(config_fake: FakeProvider, *, anthropic: bool = False) -> Settings:
    config = (anthropic_config if anthropic else openai_config)(config_fake, identifier="m", model="dep-m")
    return Settings(configurations={"m": config}, default="m", middleware=NO_RETRY)


async def test_a_limited_model_answers_429_with_retry_after_beyond_its_minute(fake: FakeProvider,
                                                                              builtin_only: PluginHost) -> None:
    clock = FakeClock(0.0)
    limit = fake.limit(2, model="dep-m", clock=clock)
    async with ServiceManager(one(fake), host=builtin_only) as manager:
        await manager.chat("a")
        clock.advance(20)
        await manager.chat("b")
        with pytest.raises(RateLimitError) as refused:
            await manager.chat("c")
    assert refused.value.retry_after_s == 40  # the first request leaves the window at 60 s
    assert (limit.admitted, limit.refused) == (2, 1)


async def test_the_limit_window_slides_with_the_clock(fake: FakeProvider, builtin_only: PluginHost) -> None:
    clock = FakeClock(0.0)
    limit = fake.limit(1, model="dep-m", clock=clock)
    async with ServiceManager(one(fake), host=builtin_only) as manager:
        await manager.chat("a")
        clock.advance(60)
        await manager.chat("b")
    assert (limit.admitted, limit.refused) == (2, 0)


async def test_a_limit_on_one_model_leaves_the_others_alone(fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.limit(0, model="other")
    async with ServiceManager(one(fake), host=builtin_only) as manager:
        response = await manager.chat("a")
    assert response.text == "echo: a"


async def test_the_prompt_cache_reports_the_part_sent_before_to_the_same_model(builtin_only: PluginHost) -> None:
    async with FakeProvider(prompt_cache=True) as fake, ServiceManager(one(fake), host=builtin_only) as manager:
        first = await manager.chat("tell me a story")
        second = await manager.chat([Message.user("tell me a story"), Message.assistant(first.text),
                                     Message.user("go on")])
    assert first.usage.cached_input_tokens == 0
    assert second.usage.cached_input_tokens == 4  # "tell me a story": one token a word


async def test_the_prompt_cache_is_per_model(builtin_only: PluginHost) -> None:
    async with FakeProvider(prompt_cache=True) as fake:
        settings = Settings(configurations={"m": openai_config(fake, identifier="m", model="dep-m"),
                                            "n": openai_config(fake, identifier="n", model="dep-n")}, default="m")
        async with ServiceManager(settings, host=builtin_only) as manager:
            await manager.chat("tell me a story", configuration="m")
            elsewhere = await manager.chat("tell me a story", configuration="n")
    assert elsewhere.usage.cached_input_tokens == 0


async def test_the_prompt_cache_speaks_anthropic_cache_reads(builtin_only: PluginHost) -> None:
    async with FakeProvider(prompt_cache=True) as fake, \
            ServiceManager(one(fake, anthropic=True), host=builtin_only) as manager:
        await manager.chat("tell me a story")
        again = await manager.chat([Message.user("tell me a story"), Message.assistant("ok"), Message.user("more")])
    assert again.usage.cached_input_tokens == 4
    assert again.usage.input_tokens == 4 + 1 + 1  # the whole prompt: the cache read is part of it


async def test_without_prompt_cache_nothing_is_reported_cached(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(one(fake), host=builtin_only) as manager:
        await manager.chat("tell me a story")
        again = await manager.chat("tell me a story")
    assert again.usage.cached_input_tokens == 0
