"""The structured_output layer, against a scripted inner layer: check, one repair turn, then a typed error."""

from __future__ import annotations

import json

import pytest

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import StructuredOutputError
from provmw.messages import ToolCall
from provmw.middleware.structured_output import StructuredOutputMiddleware
from provmw.requests import ChatRequest
from provmw.responses import CompletionResponse
from provmw.testing import call_context

CONFIG = ProviderConfig(identifier="oa", provider="openai", model="m")
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
LAYER = StructuredOutputMiddleware()


class Answers:
    """An inner layer answering each text in turn, noting the context each call was handed (None: the layer's own)."""

    def __init__(self, ctx: ProviderCallContext, *texts: str, tool_calls: tuple[ToolCall, ...] = ()) -> None:
        self.ctx, self.texts, self.tool_calls = ctx, list(texts), tool_calls
        self.notes: list[ProviderCallContext | None] = []

    async def __call__(self, config: ProviderConfig, ctx: ProviderCallContext | None = None) -> CompletionResponse:
        self.notes.append(ctx)
        return CompletionResponse(provider="openai", model="m", text=self.texts.pop(0), tool_calls=self.tool_calls)


async def test_a_valid_answer_comes_back_parsed_after_one_call() -> None:
    ctx = call_context(response_schema=SCHEMA)
    inner = Answers(ctx, '{"city": "Paris"}')
    response = await LAYER.handle(ctx, CONFIG, inner)
    assert (response.parsed, inner.notes) == ({"city": "Paris"}, [None])


async def test_an_invalid_answer_gets_one_repair_turn_that_says_what_was_wrong() -> None:
    ctx = call_context(response_schema=SCHEMA)
    inner = Answers(ctx, '{"town": "Paris"}', '{"city": "Paris"}')
    response = await LAYER.handle(ctx, CONFIG, inner)
    assert response.parsed == {"city": "Paris"}
    first, repair = inner.notes
    assert first is None and repair is not None and isinstance(repair.request, ChatRequest)
    asked, answer, ask = repair.request.messages
    assert (asked.text, answer.text) == ("hello", '{"town": "Paris"}')
    assert "'city' is a required property" in ask.text


async def test_an_answer_still_invalid_after_the_repair_is_a_typed_error() -> None:
    ctx = call_context(response_schema=SCHEMA)
    inner = Answers(ctx, "not json", '{"city": 3}')
    with pytest.raises(StructuredOutputError) as caught:
        await LAYER.handle(ctx, CONFIG, inner)
    assert (len(inner.notes), caught.value.problem) == (2, "at city: 3 is not of type 'string'")
    assert "after 2 tries" in str(caught.value)


async def test_a_call_without_a_schema_passes_through_unchecked() -> None:
    ctx = call_context()
    inner = Answers(ctx, "free text")
    response = await LAYER.handle(ctx, CONFIG, inner)
    assert (response.text, response.parsed, len(inner.notes)) == ("free text", None, 1)


async def test_a_turn_that_calls_tools_is_not_the_answer_yet() -> None:
    ctx = call_context(response_schema=SCHEMA)
    call = ToolCall(id="c1", name="weather", arguments=json.dumps({"city": "Paris"}))
    response = await LAYER.handle(ctx, CONFIG, Answers(ctx, "", tool_calls=(call,)))
    assert (response.tool_calls, response.parsed) == ((call,), None)
