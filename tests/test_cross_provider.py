"""Structured output across a failover: OpenAI -> Anthropic, each scripted to fail in turn.

Every call ends in an answer that follows the schema or in a typed error, never in free
text; a configuration that cannot honour the call is skipped, and the error says why.
"""

from __future__ import annotations

import itertools
from collections import Counter

import jsonschema
import pytest

from provmw.errors import FallbackExhaustedError, ProvmwError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault
from tests.conftest import anthropic_config, openai_config

FORECAST = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"], "additionalProperties": False}
FAULTS = {"none": None, "429": Fault(status=429), "quota": Fault(status=429, code="insufficient_quota"),
          "500": Fault(status=500), "overloaded": Fault(status=529), "401": Fault(status=401),
          "context": Fault(status=400, code="context_length_exceeded"), "malformed": Fault(malformed_json=True),
          "dropped": Fault(drop_connection=True)}
QUICK = {"retry": {"base_s": 0.001, "max_wait_s": 0.01}, "circuit_breaker": {"enabled": False}}


def chain(fake: FakeProvider, *fallbacks: str) -> Settings:
    configurations = {"oa": openai_config(fake, fallbacks=fallbacks), "an": anthropic_config(fake),
                      "oa2": openai_config(fake, identifier="oa2", model="gpt-two")}
    return Settings(configurations=configurations, default="oa", middleware=QUICK)


def fail_always(fake: FakeProvider, fault: Fault | None, route: str) -> None:
    if fault is not None:
        fake.fail_randomly(1.0, fault, route=route)


async def test_every_answer_follows_the_schema_or_is_a_typed_error(fake: FakeProvider,
                                                                   builtin_only: PluginHost) -> None:
    outcomes: Counter[str] = Counter()
    async with ServiceManager(chain(fake, "an"), host=builtin_only) as manager:
        for openai_fault, anthropic_fault in itertools.product(FAULTS.values(), repeat=2):
            fake.clear_faults()
            fail_always(fake, openai_fault, "chat")
            fail_always(fake, anthropic_fault, "messages")
            try:
                response = await manager.chat("Paris", response_schema=FORECAST)
            except ProvmwError as exc:
                outcomes[type(exc).__name__] += 1
                continue
            jsonschema.validate(response.parsed, FORECAST)
            outcomes[f"answer from {response.served_by}"] += 1
    assert sum(outcomes.values()) == len(FAULTS) ** 2
    assert outcomes["answer from oa"] == len(FAULTS) and outcomes["answer from an"] > 0
    assert outcomes["FallbackExhaustedError"] > 0


async def test_a_configuration_without_the_capability_is_skipped_for_the_next(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.fail_randomly(1.0, Fault(status=503), model="gpt-test")
    async with ServiceManager(chain(fake, "an", "oa2"), host=builtin_only) as manager:
        response = await manager.chat("Paris", response_format={"type": "json_object"})
    assert response.served_by == "oa2"
    assert fake.count(route="messages") == 0


async def test_a_chain_left_with_nothing_capable_says_which_was_skipped_and_why(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.fail_randomly(1.0, Fault(status=503), route="chat")
    async with ServiceManager(chain(fake, "an"), host=builtin_only) as manager:
        with pytest.raises(FallbackExhaustedError) as caught:
            await manager.chat("Paris", response_format={"type": "json_object"})
    assert [(a.config_id, a.sent) for a in caught.value.attempts] == [("oa", True), ("an", False)]
    assert "an: skipped, UnsupportedOperationError: provider 'anthropic' (configuration 'an') does not support " \
           "the 'response_format' operation" in str(caught.value)
    assert fake.count(route="messages") == 0
