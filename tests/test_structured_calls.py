"""response_schema end to end: through the stack, over real HTTP to the fake provider."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from provmw.errors import StructuredOutputError, UnsupportedOperationError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.sync import SyncServiceManager
from provmw.testing import FakeProvider
from tests.conftest import anthropic_config, openai_config

FORECAST = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"], "additionalProperties": False}
# The fake answers every string with "echo: ...", which this pattern refuses.
UNANSWERABLE = {"type": "object", "properties": {"city": {"type": "string", "pattern": "^[A-Z]+$"}},
                "required": ["city"]}
FAST_RETRY = {"retry": {"base_s": 0.001, "max_wait_s": 0.01, "max_attempts": 3}}


class Forecast(BaseModel):
    city: str
    days: int


def settings(fake: FakeProvider, **middleware: dict[str, object]) -> Settings:
    return Settings(configurations={"oa": openai_config(fake), "an": anthropic_config(fake)}, default="oa",
                    middleware={**FAST_RETRY, **middleware})


@pytest.mark.parametrize("configuration", ["oa", "an"])
async def test_the_answer_comes_back_parsed(fake: FakeProvider, builtin_only: PluginHost, configuration: str) -> None:
    async with ServiceManager(settings(fake), host=builtin_only) as manager:
        response = await manager.chat("Paris", configuration=configuration, response_schema=FORECAST)
    assert response.parsed == {"city": "echo: Paris", "days": 1}


async def test_a_pydantic_model_class_is_a_schema(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(settings(fake), host=builtin_only) as manager:
        response = await manager.chat("Oslo", response_schema=Forecast)
    assert Forecast.model_validate(response.parsed) == Forecast(city="echo: Oslo", days=1)


async def test_a_cached_answer_keeps_its_parsed_value(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(settings(fake, cache={"operations": ["chat"]}), host=builtin_only) as manager:
        first = await manager.chat("Paris", response_schema=FORECAST, temperature=0)
        again = await manager.chat("Paris", response_schema=FORECAST, temperature=0)
        other = await manager.chat("Paris", temperature=0)
    assert (again.cached, again.parsed) == (True, first.parsed)
    assert (other.cached, other.parsed) == (False, None)


async def test_an_answer_invalid_twice_costs_two_requests_whatever_the_retries(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(settings(fake), host=builtin_only) as manager:
        with pytest.raises(StructuredOutputError, match="does not match"):
            await manager.chat("Paris", response_schema=UNANSWERABLE)
    assert fake.count() == 2
    repair = fake.received[-1].body["messages"]
    assert [m["role"] for m in repair] == ["user", "assistant", "user"]
    assert "does not match" in repair[-1]["content"]


async def test_a_configuration_that_cannot_honour_the_call_refuses_it_unsent(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(settings(fake), host=builtin_only) as manager:
        with pytest.raises(UnsupportedOperationError, match="configuration 'an'.*'response_format'"):
            await manager.chat("hi", configuration="an", response_format={"type": "json_object"})
        with pytest.raises(UnsupportedOperationError, match="completion"):
            await manager.complete("once", configuration="an")
    assert fake.count() == 0


async def test_the_sync_twin_takes_a_response_schema(fake: FakeProvider, builtin_only: PluginHost) -> None:
    def call() -> object:  # in a thread: the fake answers from this test's loop
        with SyncServiceManager(settings(fake), host=builtin_only) as manager:
            return manager.chat("Rome", response_schema=FORECAST).parsed

    assert await asyncio.to_thread(call) == {"city": "echo: Rome", "days": 1}


async def test_without_the_structured_output_layer_the_answer_is_still_checked(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    off = settings(fake, structured_output={"enabled": False})
    async with ServiceManager(off, host=builtin_only) as manager:
        assert (await manager.chat("Paris", response_schema=FORECAST)).parsed["days"] == 1
        with pytest.raises(StructuredOutputError):
            await manager.chat("Paris", response_schema=UNANSWERABLE)
    assert fake.count() == 2
