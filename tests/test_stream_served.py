"""A stream says who served it and checks a response_schema at its end: real HTTP to the fake provider."""

from __future__ import annotations

import pytest

from provmw.errors import StructuredOutputError
from provmw.manager import ServiceManager
from provmw.messages import ToolCall
from provmw.plugins import PluginHost
from provmw.responses import Attempt, ChatChunk, Usage
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault
from tests.conftest import anthropic_config, openai_config

FORECAST = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"], "additionalProperties": False}
UNANSWERABLE = {"type": "object", "properties": {"city": {"type": "string", "pattern": "^[A-Z]+$"}},
                "required": ["city"]}


def settings(fake: FakeProvider) -> Settings:
    return Settings(configurations={"oa": openai_config(fake, fallbacks=("an",)), "an": anthropic_config(fake)},
                    default="oa", middleware={"retry": {"base_s": 0.001, "max_attempts": 1}})


async def read(manager: ServiceManager, *args: object, **kwargs: object) -> list[ChatChunk]:
    return [chunk async for chunk in manager.stream_chat(*args, **kwargs)]  # type: ignore[arg-type]


async def test_every_chunk_names_the_configuration_that_served(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(settings(fake), host=builtin_only) as manager:
        chunks = await read(manager, "hello there")
    assert {chunk.served_by for chunk in chunks} == {"oa"}


async def test_a_fallback_stream_names_it_and_the_attempt_before(fake: FakeProvider,
                                                                 builtin_only: PluginHost) -> None:
    fake.script(Fault(status=503))
    async with ServiceManager(settings(fake), host=builtin_only) as manager:
        chunks = await read(manager, "hello there")
    assert chunks[-1].served_by == "an"
    assert chunks[-1].attempts[0] == Attempt(config_id="oa", error_type="ProviderUnavailableError", status=503)


async def test_the_last_chunk_carries_the_parsed_answer(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(settings(fake), host=builtin_only) as manager:
        chunks = await read(manager, "Paris", response_schema=FORECAST)
    assert chunks[-1].parsed == {"city": "echo: Paris", "days": 1}
    assert [chunk.parsed for chunk in chunks[:-1]] == [None] * (len(chunks) - 1)


async def test_an_invalid_answer_raises_after_its_last_chunk(fake: FakeProvider, builtin_only: PluginHost) -> None:
    seen: list[ChatChunk] = []

    async def read_into_seen(manager: ServiceManager) -> None:
        async for chunk in manager.stream_chat("Paris", response_schema=UNANSWERABLE):
            seen.append(chunk)

    async with ServiceManager(settings(fake), host=builtin_only) as manager:
        with pytest.raises(StructuredOutputError, match="does not follow response_schema"):
            await read_into_seen(manager)
    assert seen[-1].finish_reason is not None and len(fake.received) == 1


async def test_stream_chat_with_tools_sends_the_schema_and_a_tool_turn_has_no_parsed(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    async with ServiceManager(settings(fake), host=builtin_only) as manager:
        chunks = [c async for c in manager.stream_chat_with_tools("Paris", [tool], response_schema=FORECAST)]
    assert chunks[-1].tool_calls and chunks[-1].parsed is None
    assert fake.received[-1].body["response_format"]["json_schema"]["schema"] == FORECAST


def test_a_chunk_round_trips_through_its_dict() -> None:
    chunk = ChatChunk(text="a", finish_reason="stop", usage=Usage(input_tokens=1, output_tokens=2, cost_usd=0.5),
                      tool_calls=(ToolCall(id="c", name="f", arguments="{}"),), served_by="oa",
                      attempts=(Attempt(config_id="x", error_type="E", status=503),), parsed={"k": [1]})
    assert ChatChunk.from_dict(chunk.to_dict()) == chunk and chunk.to_dict()["served_by"] == "oa"


async def test_an_anthropic_stream_gives_the_structured_answer_as_text_and_parsed(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    only_anthropic = Settings(configurations={"an": anthropic_config(fake)}, default="an",
                              middleware={"retry": {"base_s": 0.001, "max_attempts": 1}})
    async with ServiceManager(only_anthropic, host=builtin_only) as manager:
        chunks = await read(manager, "Paris", response_schema=FORECAST)
    assert chunks[-1].parsed == {"city": "echo: Paris", "days": 1}
    assert (chunks[-1].finish_reason, [c for chunk in chunks for c in chunk.tool_calls]) == ("stop", [])
