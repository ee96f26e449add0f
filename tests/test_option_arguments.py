"""Generation options as typed keyword arguments, and the option names providers use today
(issue #21, item 6; ADR 0019)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from provmw._call.facts import call_facts
from provmw.config import KNOWN_OPTIONS, GenerationOptions, ProviderConfig, check_options
from provmw.context import ProviderOperation
from provmw.errors import ConfigurationError, UnknownArgumentError
from provmw.manager import ServiceManager
from provmw.messages import Message, ToolSpec
from provmw.plugins import PluginHost
from provmw.pricing import PriceTable
from provmw.requests import ChatRequest
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, anthropic_config, openai_config

Call = Callable[[ServiceManager], Awaitable[object]]


@pytest.fixture
async def manager(fake: FakeProvider, builtin_only: PluginHost) -> AsyncIterator[ServiceManager]:
    settings = Settings(configurations={"oa": openai_config(fake), "an": anthropic_config(fake)}, default="oa",
                        middleware=BUILTIN_MIDDLEWARE_OFF)
    async with ServiceManager(settings, host=builtin_only) as manager:
        yield manager


async def _streamed(manager: ServiceManager) -> None:
    [chunk async for chunk in manager.stream_chat("hi", seed=7)]


EVERY_METHOD: dict[str, Call] = {
    "chat": lambda m: m.chat("hi", seed=7),
    "complete": lambda m: m.complete("hi", seed=7),
    "vision": lambda m: m.vision("what?", ["https://example.com/a.png"], seed=7),
    "chat_with_tools": lambda m: m.chat_with_tools("hi", [ToolSpec("t")], seed=7),
    "stream_chat": _streamed,
}


async def test_chat_takes_temperature_and_max_tokens_as_keywords(manager: ServiceManager, fake: FakeProvider) -> None:
    await manager.chat("hi", temperature=0.2, max_tokens=5)
    body = fake.received[0].body
    assert (body["temperature"], body["max_tokens"]) == (0.2, 5)


@pytest.mark.parametrize("method", list(EVERY_METHOD))
async def test_every_generating_method_takes_option_keywords(
        manager: ServiceManager, fake: FakeProvider, method: str) -> None:
    await EVERY_METHOD[method](manager)
    assert fake.received[0].body["seed"] == 7


async def test_keywords_merge_with_options(manager: ServiceManager, fake: FakeProvider) -> None:
    await manager.chat("hi", options={"top_p": 0.5}, stop=["\n"])
    assert (fake.received[0].body["top_p"], fake.received[0].body["stop"]) == (0.5, ["\n"])


async def test_an_option_given_twice_is_refused_and_nothing_is_sent(
        manager: ServiceManager, fake: FakeProvider) -> None:
    with pytest.raises(ConfigurationError, match="'max_tokens' given twice"):
        await manager.chat("hi", options={"max_tokens": 5}, max_tokens=6)
    assert fake.count() == 0


async def test_an_unknown_keyword_says_where_a_vendor_field_goes(manager: ServiceManager) -> None:
    with pytest.raises(UnknownArgumentError, match=r"'frobnicate'.*options=\{'extra_body'") as caught:
        await manager.chat("hi", frobnicate=1)  # type: ignore[call-arg]
    assert isinstance(caught.value, TypeError)


async def test_a_misspelt_option_keyword_gets_a_hint(manager: ServiceManager) -> None:
    with pytest.raises(UnknownArgumentError, match="did you mean 'temperature'"):
        await manager.chat("hi", temprature=0.2)  # type: ignore[call-arg]


async def test_a_keyword_of_the_wrong_type_is_named(manager: ServiceManager, fake: FakeProvider) -> None:
    with pytest.raises(ConfigurationError, match="options.parallel_tool_calls must be bool"):
        await manager.chat("hi", parallel_tool_calls=1)  # type: ignore[arg-type]
    assert fake.count() == 0


def test_the_keywords_are_exactly_the_known_options() -> None:
    assert GenerationOptions.__optional_keys__ == frozenset(KNOWN_OPTIONS)


@pytest.mark.parametrize(("name", "value"), [
    ("max_completion_tokens", 50), ("reasoning_effort", "low"), ("parallel_tool_calls", False),
    ("logprobs", True), ("top_logprobs", 3), ("top_k", 40), ("thinking", {"type": "enabled", "budget_tokens": 2048}),
    ("metadata", {"user_id": "u-1"}),
])
def test_current_provider_option_names_are_known(name: str, value: object) -> None:
    check_options({name: value})


@pytest.mark.parametrize("name", ["reasoning_efort", "max_completion_token"])
def test_an_unknown_option_points_to_extra_body(name: str) -> None:
    with pytest.raises(ConfigurationError, match=rf"options.{name} is not a known option.*'extra_body'"):
        check_options({name: 1})


async def test_openai_passes_the_reasoning_options(manager: ServiceManager, fake: FakeProvider) -> None:
    await manager.chat("hi", max_completion_tokens=64, reasoning_effort="low", parallel_tool_calls=False)
    body = fake.received[0].body
    assert (body["max_completion_tokens"], body["reasoning_effort"], body["parallel_tool_calls"]) == (64, "low", False)
    assert "max_tokens" not in body


async def test_openai_leaves_out_anthropic_thinking(
        manager: ServiceManager, fake: FakeProvider, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="provmw.providers.openai"):
        await manager.chat("hi", thinking={"type": "enabled", "budget_tokens": 1024})
    assert "thinking" not in fake.received[0].body
    assert "openai ignores options ['thinking']" in caplog.text


async def test_anthropic_maps_its_own_options(manager: ServiceManager, fake: FakeProvider) -> None:
    await manager.chat("hi", configuration="an", top_k=40, max_completion_tokens=77, metadata={"user_id": "u-1"},
                       thinking={"type": "enabled", "budget_tokens": 1024}, reasoning_effort="low")
    body: dict[str, Any] = fake.received[0].body
    assert (body["top_k"], body["max_tokens"], body["metadata"]) == (40, 77, {"user_id": "u-1"})
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert "reasoning_effort" not in body and "max_completion_tokens" not in body


@pytest.mark.parametrize(("in_file", "in_call", "bound"), [
    ({}, {"max_completion_tokens": 300}, 300),
    ({"max_tokens": 200}, {"max_completion_tokens": 300}, 300),  # both: the larger, a reservation is never short
    ({"max_completion_tokens": 400}, {"max_tokens": 200}, 400),
    ({}, {}, None),
])
def test_max_completion_tokens_bounds_the_output_for_budgets(
        in_file: dict[str, Any], in_call: dict[str, Any], bound: int | None) -> None:
    config = ProviderConfig(identifier="o", provider="openai", model="o3", options=in_file)
    request = ChatRequest((Message.user("hi"),), options=in_call)
    facts = call_facts(ProviderOperation.CHAT, config, request, chain=(config,), prices=PriceTable(),
                       known_controls=())
    assert facts.max_output_tokens == bound
