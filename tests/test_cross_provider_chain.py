"""Structured output down a chain of four wire formats: OpenAI -> Anthropic -> Gemini -> Bedrock,
each scripted to fail in turn. Every call ends in an answer that follows the schema, from the
first configuration still standing, or in a typed error; never in free text."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import jsonschema
import pytest
from provmw_bedrock.fake import BedrockWire
from provmw_gemini.fake import GeminiWire

from provmw.config import ProviderConfig
from provmw.errors import FallbackExhaustedError, ProvmwError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault
from tests.conftest import anthropic_config, openai_config

FORECAST = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"], "additionalProperties": False}
CHAIN = ("oa", "an", "gem", "bed")
MODELS = {"oa": "gpt-test", "an": "claude-test", "gem": "gemini-2.5-flash", "bed": "anthropic.claude-3-haiku-v1:0"}
FAULTS = (Fault(status=503), Fault(status=429), Fault(status=529), Fault(malformed_json=True),
          Fault(drop_connection=True), Fault(status=500, code="overloaded_error"))


@pytest.fixture
async def fake() -> AsyncIterator[FakeProvider]:
    async with FakeProvider(wires=[GeminiWire(), BedrockWire()]) as server:
        yield server


def settings(fake: FakeProvider) -> Settings:
    return Settings(
        configurations={
            "oa": openai_config(fake, fallbacks=CHAIN[1:]), "an": anthropic_config(fake),
            "gem": ProviderConfig(identifier="gem", provider="gemini", model=MODELS["gem"],
                                  base_url=fake.url + "/v1beta", api_key="k"),
            "bed": ProviderConfig(identifier="bed", provider="bedrock", model=MODELS["bed"], base_url=fake.url,
                                  api_key="k")},
        default="oa", middleware={"retry": {"base_s": 0.001, "max_wait_s": 0.01, "max_attempts": 2},
                                  "circuit_breaker": {"enabled": False}})


def plugins() -> PluginHost:
    return PluginHost(PluginPolicy(allow=("gemini", "bedrock")), environ={})


@pytest.mark.parametrize("down", range(len(CHAIN) + 1))
async def test_the_first_configuration_standing_answers_with_a_valid_object(fake: FakeProvider, down: int) -> None:
    for name in CHAIN[:down]:
        fake.fail_randomly(1.0, Fault(status=503), model=MODELS[name])
    async with ServiceManager(settings(fake), host=plugins()) as manager:
        if down == len(CHAIN):
            with pytest.raises(FallbackExhaustedError):
                await manager.chat("Paris", response_schema=FORECAST)
            return
        response = await manager.chat("Paris", response_schema=FORECAST)
    jsonschema.validate(response.parsed, FORECAST)
    assert response.served_by == CHAIN[down]


async def test_every_mix_of_faults_ends_in_a_valid_object_or_a_typed_error(fake: FakeProvider) -> None:
    answers = errors = 0
    async with ServiceManager(settings(fake), host=plugins()) as manager:
        for faults in itertools.islice(itertools.product((None, *FAULTS), repeat=len(CHAIN)), 0, None, 5):
            fake.clear_faults()
            for name, fault in zip(CHAIN, faults, strict=True):
                if fault is not None:
                    fake.fail_randomly(1.0, fault, model=MODELS[name])
            try:
                response = await manager.chat("Oslo", response_schema=FORECAST)
            except ProvmwError:
                errors += 1
                continue
            jsonschema.validate(response.parsed, FORECAST)
            answers += 1
    assert answers > 0 and errors > 0
