"""Installed, the plugin registers provider "bedrock" through the entry point and serves calls
through the whole stack: a fallback from a failing OpenAI configuration lands on Bedrock, signed."""

from __future__ import annotations

import json

from provmw_bedrock import BedrockAdapter

from bedrock_tests.conftest import ACCESS_KEY, REGION
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import parse_settings
from provmw.testing import FakeProvider, Fault

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
          "required": ["city", "days"]}


def manager(fake: FakeProvider) -> ServiceManager:
    document = {"configurations": {
        "primary": {"provider": "openai", "model": "gpt-4o-mini", "base_url": fake.openai_base_url,
                    "fallbacks": ["bedrock"]},
        "bedrock": {"provider": "bedrock", "model": "anthropic.claude-3-haiku-20240307-v1:0", "base_url": fake.url}}}
    return ServiceManager(parse_settings(document, "provmw.toml", {}), host=PluginHost(PluginPolicy(), environ={}))


def test_the_entry_point_registers_the_bedrock_adapter() -> None:
    providers = PluginHost(PluginPolicy(), environ={}).load().collect_providers()
    assert isinstance(providers["bedrock"], BedrockAdapter)


async def test_a_call_falls_back_from_openai_to_bedrock_signed(fake: FakeProvider) -> None:
    fake.script(Fault(status=503), route="chat")
    async with manager(fake) as stack:
        response = await stack.chat("hello world", configuration="primary", controls={"max_attempts": 1})
    assert (response.text, response.served_by, response.provider) == ("echo: hello world", "bedrock", "bedrock")
    assert f"Credential={ACCESS_KEY}/" in fake.received[-1].headers["Authorization"]
    assert f"/{REGION}/bedrock/aws4_request" in fake.received[-1].headers["Authorization"]


async def test_a_stream_through_the_manager_reaches_bedrock(fake: FakeProvider) -> None:
    async with manager(fake) as stack:
        chunks = [c async for c in stack.stream_chat("hello world", configuration="bedrock")]
    assert "".join(c.text for c in chunks).strip() == "echo: hello world"


async def test_a_response_schema_through_the_stack_is_a_valid_object(fake: FakeProvider) -> None:
    async with manager(fake) as stack:
        response = await stack.chat("Paris", configuration="bedrock", response_schema=SCHEMA)
    assert set(json.loads(response.text)) == {"city", "days"}
