"""Responses calls through the manager: a failover from OpenAI's own wire to Anthropic's chat, and the cache
rule for calls that continue or keep a stored response."""

from __future__ import annotations

import json

import jsonschema
import pytest

from provmw.errors import FallbackExhaustedError, StructuredOutputError
from provmw.manager import ServiceManager
from provmw.messages import ToolSpec
from provmw.operations.responses_api import FunctionCallOutput, MessageItem
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, anthropic_config, openai_config
from tests.hostile import HostileProvider

FORECAST = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"], "additionalProperties": False}
WEATHER = ToolSpec("weather", "Weather by city", {"type": "object", "properties": {"city": {"type": "string"}}})
PRICE = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0}
QUICK = {"retry": {"base_s": 0.001, "max_wait_s": 0.01}, "circuit_breaker": {"enabled": False}}


def failover(fake: FakeProvider) -> Settings:
    return Settings(configurations={"oa": openai_config(fake, fallbacks=("an",)), "an": anthropic_config(fake)},
                    default="oa", middleware=QUICK)


@pytest.mark.parametrize("fault", [Fault(status=500), Fault(status=429)])
async def test_a_response_with_tools_fails_over_to_anthropic_and_ends_in_a_valid_object(
        fake: FakeProvider, builtin_only: PluginHost, fault: Fault) -> None:
    fake.fail_randomly(1.0, fault, route="responses")
    asked = MessageItem("user", "Paris")
    async with ServiceManager(failover(fake), host=builtin_only) as manager:
        first = await manager.respond([asked], tools=[WEATHER], response_schema=FORECAST)
        result = FunctionCallOutput(first.tool_calls[0].id, "sunny")
        answer = await manager.respond([asked, *first.output, result], tools=[WEATHER], response_schema=FORECAST)
    assert (first.served_by, first.finish_reason, first.tool_calls[0].args) == ("an", "tool_calls", {"city": "Paris"})
    jsonschema.validate(answer.parsed, FORECAST)
    assert (answer.served_by, answer.status, answer.attempts[-1].config_id) == ("an", "completed", "an")
    assert fake.count(route="messages") == 2


async def test_a_streamed_response_fails_over_to_anthropic(fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.fail_randomly(1.0, Fault(status=500), route="responses")
    async with ServiceManager(failover(fake), host=builtin_only) as manager:
        chunks = [c async for c in manager.stream_respond("hello world", instructions="Be brief")]
    assert "".join(c.text for c in chunks).strip() == "echo: hello world"
    assert chunks[-1].served_by == "an" and chunks[-1].usage is not None


async def test_a_call_that_only_openai_can_serve_does_not_fail_over(fake: FakeProvider,
                                                                     builtin_only: PluginHost) -> None:
    fake.fail_randomly(1.0, Fault(status=500), route="responses")
    async with ServiceManager(failover(fake), host=builtin_only) as manager:
        with pytest.raises(FallbackExhaustedError, match="an: skipped.*'responses'"):
            await manager.respond("hi", store=True)
    assert fake.count(route="messages") == 0


def cached(fake: FakeProvider) -> Settings:
    return Settings(configurations={"oa": openai_config(fake)},
                    middleware={**BUILTIN_MIDDLEWARE_OFF, "cache": {"operations": ["chat", "responses"]}})


async def test_a_deterministic_response_is_cached(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(cached(fake), host=builtin_only) as manager:
        answers = [await manager.respond("2 + 2?", options={"temperature": 0}) for _ in range(3)]
    assert [a.cached for a in answers] == [False, True, True] and fake.count(route="responses") == 1


async def test_a_call_continuing_a_stored_response_is_never_cached(fake: FakeProvider,
                                                                    builtin_only: PluginHost) -> None:
    async with ServiceManager(cached(fake), host=builtin_only) as manager:
        first = await manager.respond("2 + 2?", store=True, options={"temperature": 0})
        later = [await manager.respond("and 3 + 3?", previous_response_id=first.response_id,
                                       options={"temperature": 0}) for _ in range(3)]
    assert not first.cached and not any(a.cached for a in later)
    assert fake.count(route="responses") == 4


async def test_an_answer_off_the_schema_fails_after_the_ledger_records_what_it_cost(
        hostile: HostileProvider, builtin_only: PluginHost) -> None:
    off = {"id": "resp_1", "status": "completed", "model": "gpt-test", "usage": {"input_tokens": 5, "output_tokens": 3},
           "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "nope"}]}]}
    hostile.answer(json.dumps(off))
    settings = Settings(configurations={"oa": openai_config(hostile, price=PRICE)},  # type: ignore[arg-type]
                        middleware={**BUILTIN_MIDDLEWARE_OFF, "structured_output": {}, "usage": {"store": "memory"}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        with pytest.raises(StructuredOutputError, match="not JSON"):
            await manager.respond("hi", response_schema=FORECAST)
        journal = manager.state.usage_journal()
        await journal.flush()
        records = await journal.store.records()
    assert [(r.billed, r.input_tokens, r.output_tokens) for r in records] == [("yes", 5, 3)]


@pytest.mark.parametrize("layer", [{}, {"enabled": False}])
async def test_a_response_s_json_is_parsed_with_the_layer_on_or_off(fake: FakeProvider, builtin_only: PluginHost,
                                                                    layer: dict[str, object]) -> None:
    settings = Settings(configurations={"oa": openai_config(fake)}, middleware={"structured_output": layer})
    async with ServiceManager(settings, host=builtin_only) as manager:
        response = await manager.respond("Rome", response_schema=FORECAST)
    assert response.parsed == {"city": "echo: Rome", "days": 1}
