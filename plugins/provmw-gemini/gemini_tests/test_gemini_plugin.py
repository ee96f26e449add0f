"""Installed, the plugin registers provider "gemini" through the entry point and serves calls
through the whole stack: a fallback from a failing OpenAI configuration lands on Gemini."""

from __future__ import annotations

from provmw_gemini import GeminiAdapter

from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import parse_settings
from provmw.testing import FakeProvider, Fault


def manager(fake: FakeProvider) -> ServiceManager:
    document = {"configurations": {
        "primary": {"provider": "openai", "model": "gpt-4o-mini", "base_url": fake.openai_base_url,
                    "fallbacks": ["gemini"]},
        "gemini": {"provider": "gemini", "model": "gemini-2.5-flash", "base_url": f"{fake.url}/v1beta"}}}
    return ServiceManager(parse_settings(document, "provmw.toml", {}), host=PluginHost(PluginPolicy(), environ={}))


def test_the_entry_point_registers_the_gemini_adapter() -> None:
    providers = PluginHost(PluginPolicy(), environ={}).load().collect_providers()
    assert isinstance(providers["gemini"], GeminiAdapter)


async def test_a_call_falls_back_from_openai_to_gemini_through_the_stack(gemini_fake: FakeProvider) -> None:
    gemini_fake.script(Fault(status=503), route="chat")
    async with manager(gemini_fake) as stack:
        response = await stack.chat("hello world", configuration="primary", controls={"max_attempts": 1})
    assert (response.text, response.served_by, response.provider) == ("echo: hello world", "gemini", "gemini")
    assert gemini_fake.count(route="gemini_generate") == 1


async def test_a_stream_through_the_manager_reaches_gemini(gemini_fake: FakeProvider) -> None:
    async with manager(gemini_fake) as stack:
        chunks = [c async for c in stack.stream_chat("hello world", configuration="gemini")]
    assert "".join(c.text for c in chunks) == "echo: hello world"
