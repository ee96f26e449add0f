"""The official openai SDK as a second client of the same stream: it and provmw read the same
text, the same tool calls and the same usage from what FakeProvider sends."""

from __future__ import annotations

from typing import Any

import pytest
from openai import AsyncOpenAI

from provmw.manager import ServiceManager
from provmw.messages import ToolSpec
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import openai_config

WEATHER = ToolSpec(name="weather", description="Weather by city",
                   parameters={"type": "object", "properties": {"query": {"type": "string"}}})


async def sdk_read(fake: FakeProvider, prompt: str, tools: list[dict[str, Any]]) -> tuple[str, list[Any], Any]:
    client = AsyncOpenAI(base_url=fake.openai_base_url, api_key="sk-test", max_retries=0)
    extra: dict[str, Any] = {"tools": tools} if tools else {}
    async with client.chat.completions.stream(model="gpt-test", messages=[{"role": "user", "content": prompt}],
                                              stream_options={"include_usage": True}, **extra) as stream:
        final = await stream.get_final_completion()
    await client.close()
    message = final.choices[0].message
    calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []]
    return message.content or "", calls, final.usage


async def provmw_read(fake: FakeProvider, builtin_only: PluginHost, prompt: str,
                      tools: list[ToolSpec]) -> tuple[str, list[Any], Any]:
    async with ServiceManager(Settings(configurations={"oa": openai_config(fake)}), host=builtin_only) as manager:
        stream = manager.stream_chat_with_tools(prompt, tools) if tools else manager.stream_chat(prompt)
        chunks = [c async for c in stream]
    calls = [(c.id, c.name, c.arguments) for chunk in chunks for c in chunk.tool_calls]
    return "".join(c.text for c in chunks), calls, chunks[-1].usage


@pytest.mark.parametrize(("prompt", "with_tools"), [("tell me a story", False), ("Paris\nRome\nParis", True)])
async def test_the_sdk_and_provmw_read_the_same_stream(fake: FakeProvider, builtin_only: PluginHost,
                                                       prompt: str, with_tools: bool) -> None:
    tools = [{"type": "function", "function": {"name": WEATHER.name, "description": WEATHER.description,
                                               "parameters": dict(WEATHER.parameters)}}] if with_tools else []
    sdk_text, sdk_calls, sdk_usage = await sdk_read(fake, prompt, tools)
    text, calls, usage = await provmw_read(fake, builtin_only, prompt, [WEATHER] if with_tools else [])
    assert (text, calls) == (sdk_text, sdk_calls)
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (
        sdk_usage.prompt_tokens, sdk_usage.completion_tokens)
    assert len(calls) == (3 if with_tools else 0)
