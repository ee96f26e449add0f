"""The official Anthropic SDK, unmodified, as a client of the gateway (whose manager calls a FakeProvider)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import pytest
from anthropic.types import MessageParam, ToolParam

from provmw.testing import FakeProvider
from tests.gateway.test_server import Running, running_gateway

TEXT = "héllo wörld ✓ 世界, twice  spaced"
HELLO: list[MessageParam] = [{"role": "user", "content": TEXT}]
WEATHER: ToolParam = {
    "name": "weather", "description": "the weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture
async def gw(fake: FakeProvider, tmp_path: Path) -> AsyncIterator[Running]:
    async with running_gateway(fake, tmp_path) as running:
        yield running


def sdk(gw: Running, key: str | None = None) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.url, api_key=key or gw.key, max_retries=0)


@pytest.mark.parametrize("model", ["claude", "chat"])  # either wire upstream serves the Anthropic wire
async def test_messages_answer_with_usage(gw: Running, model: str) -> None:
    answer = await sdk(gw).messages.create(model=model, max_tokens=100, messages=HELLO)
    assert answer.content[0].type == "text" and answer.content[0].text == f"echo: {TEXT}"
    assert answer.stop_reason == "end_turn" and answer.usage.output_tokens > 0


async def test_a_stream_carries_the_upstream_text_byte_for_byte(gw: Running) -> None:
    direct = anthropic.AsyncAnthropic(base_url=gw.fake.anthropic_base_url, api_key="x")
    async with direct.messages.stream(model="claude-test", max_tokens=100, messages=HELLO) as stream:
        upstream = [t async for t in stream.text_stream]
    async with sdk(gw).messages.stream(model="claude", max_tokens=100, messages=HELLO) as stream:
        through = [t async for t in stream.text_stream]
        final = await stream.get_final_message()
    assert "".join(through) == "".join(upstream)
    assert final.usage.output_tokens > 0 and final.stop_reason == "end_turn"


async def test_tools_come_back_as_tool_use_blocks(gw: Running) -> None:
    answer = await sdk(gw).messages.create(model="claude", max_tokens=100, tools=[WEATHER],
                                           messages=[{"role": "user", "content": "weather in Paris?"}])
    uses = [b for b in answer.content if b.type == "tool_use"]
    assert answer.stop_reason == "tool_use" and uses and uses[0].name == "weather"


async def test_a_streamed_tool_use_arrives_with_its_input(gw: Running) -> None:
    async with sdk(gw).messages.stream(model="claude", max_tokens=100, tools=[WEATHER],
                                       messages=[{"role": "user", "content": "weather in Paris?"}]) as stream:
        final = await stream.get_final_message()
    uses = [b for b in final.content if b.type == "tool_use"]
    assert uses and isinstance(uses[0].input, dict) and "city" in uses[0].input


async def test_a_disabled_key_is_the_sdks_authentication_error(gw: Running) -> None:
    await gw.keys.disable(gw.record.key_id)
    with pytest.raises(anthropic.AuthenticationError):
        await sdk(gw).messages.create(model="claude", max_tokens=10, messages=HELLO)
    assert gw.fake.count() == 0


async def test_an_unknown_model_is_the_sdks_not_found_error(gw: Running) -> None:
    with pytest.raises(anthropic.NotFoundError):
        await sdk(gw).messages.create(model="claude-nope", max_tokens=10, messages=HELLO)


async def test_models_list_in_anthropics_shape(gw: Running) -> None:
    page = await sdk(gw).models.list()
    assert [m.id for m in page.data] == ["chat", "claude", "rank", "fast"]


async def test_a_budget_refusal_is_the_sdks_rate_limit_error_and_not_retried(gw: Running) -> None:
    await gw.keys.set_budget("key", gw.record.key_id, "total", max_requests=0)
    client = anthropic.AsyncAnthropic(base_url=gw.url, api_key=gw.key, max_retries=2)
    with pytest.raises(anthropic.RateLimitError) as refused:
        await client.messages.create(model="claude", max_tokens=100, messages=HELLO)
    assert gw.record.key_id in refused.value.message and gw.fake.count() == 0
    assert refused.value.response.headers["x-should-retry"] == "false"
