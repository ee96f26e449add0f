"""The fake provider plays a whole tool round trip on both its chat wires: arguments that fit the
tool's declared parameters, then an answer made from the tool's result."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from provmw.config import ProviderConfig
from provmw.http import HttpClient
from provmw.messages import Message, ToolSpec
from provmw.providers.anthropic import AnthropicAdapter
from provmw.providers.openai import OpenAIAdapter
from provmw.requests import ChatRequest
from provmw.testing import FakeProvider
from tests.conftest import anthropic_config, openai_config

WEATHER = ToolSpec(name="get_weather", description="Weather by city", parameters={
    "type": "object", "required": ["city", "days"],
    "properties": {"unit": {"type": "string"}, "city": {"type": "string"}, "days": {"type": "integer"}}})
Adapter = OpenAIAdapter | AnthropicAdapter
Configure = Callable[[FakeProvider], ProviderConfig]
WIRES = [(OpenAIAdapter(), openai_config), (AnthropicAdapter(), anthropic_config)]


@pytest.mark.parametrize(("adapter", "config"), WIRES, ids=["openai", "anthropic"])
async def test_a_tool_call_fills_the_required_properties_with_their_types(
        fake: FakeProvider, http: HttpClient, adapter: Adapter, config: Configure) -> None:
    request = ChatRequest((Message.user("Paris"),), tools=(WEATHER,))
    response = await adapter.chat(http, config(fake), request)
    assert [c.args for c in response.tool_calls] == [{"city": "Paris", "days": 1}]


@pytest.mark.parametrize(("adapter", "config"), WIRES, ids=["openai", "anthropic"])
async def test_after_the_tool_result_the_answer_comes_from_it(
        fake: FakeProvider, http: HttpClient, adapter: Adapter, config: Configure) -> None:
    first = await adapter.chat(http, config(fake), ChatRequest((Message.user("Paris"),), tools=(WEATHER,)))
    history = (Message.user("Paris"), Message.assistant(tool_calls=first.tool_calls),
               Message.tool(first.tool_calls[0].id, "18 C, sunny"))
    final = await adapter.chat(http, config(fake), ChatRequest(history, tools=(WEATHER,)))
    assert (final.text, final.tool_calls) == ("echo: Paris (tool said: 18 C, sunny)", ())
