"""A Responses call with function tools and a schema, OpenAI's own wire failing over to Anthropic's chat,
in each pair of faults the cross-provider suite runs: it ends in an object that follows the schema (after
its tool round) or in a typed error, never in free text."""

from __future__ import annotations

import itertools
from collections import Counter

import jsonschema

from provmw.errors import ProvmwError
from provmw.manager import ServiceManager
from provmw.operations.responses_api import FunctionCallOutput, MessageItem
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import anthropic_config, openai_config
from tests.operations.test_responses_calls import FORECAST, QUICK, WEATHER
from tests.test_cross_provider import FAULTS, fail_always


async def answer(manager: ServiceManager) -> str:
    asked = MessageItem("user", "Paris")
    first = await manager.respond([asked], tools=[WEATHER], response_schema=FORECAST)
    result = FunctionCallOutput(first.tool_calls[0].id, "sunny")
    final = await manager.respond([asked, *first.output, result], tools=[WEATHER], response_schema=FORECAST)
    jsonschema.validate(final.parsed, FORECAST)
    return f"answer from {final.served_by}"


async def test_every_response_follows_the_schema_or_is_a_typed_error(fake: FakeProvider,
                                                                     builtin_only: PluginHost) -> None:
    settings = Settings(configurations={"oa": openai_config(fake, fallbacks=("an",)), "an": anthropic_config(fake)},
                        default="oa", middleware=QUICK)
    outcomes: Counter[str] = Counter()
    async with ServiceManager(settings, host=builtin_only) as manager:
        for openai_fault, anthropic_fault in itertools.product(FAULTS.values(), repeat=2):
            fake.clear_faults()
            fail_always(fake, openai_fault, "responses")
            fail_always(fake, anthropic_fault, "messages")
            try:
                outcomes[await answer(manager)] += 1
            except ProvmwError as exc:
                outcomes[type(exc).__name__] += 1
    assert sum(outcomes.values()) == len(FAULTS) ** 2
    assert outcomes["answer from oa"] == len(FAULTS) and outcomes["answer from an"] > 0
    assert outcomes["FallbackExhaustedError"] > 0
