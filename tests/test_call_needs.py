"""What a call needs of the configuration that serves it, and which of its chain cannot (ADR 0024)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from provmw._call.facts import ALLOWANCES, call_facts, call_needs
from provmw.config import ProviderConfig
from provmw.context import ProviderOperation
from provmw.messages import ImagePart, Message, TextPart, ToolSpec
from provmw.pricing import PriceTable
from provmw.providers import Capabilities
from provmw.providers.anthropic import AnthropicAdapter
from provmw.providers.openai import OpenAIAdapter
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest, ProviderRequest

OA = ProviderConfig(identifier="oa", provider="openai", model="gpt", fallbacks=("an",))
AN = ProviderConfig(identifier="an", provider="anthropic", model="claude")
OFFERED = {"openai": OpenAIAdapter.capabilities, "anthropic": AnthropicAdapter.capabilities}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
HI = (Message.user("hi"),)


@pytest.mark.parametrize(("operation", "request_", "needs"), [
    (ProviderOperation.CHAT, ChatRequest(HI), {"chat"}),
    (ProviderOperation.TOOLS, ChatRequest(HI, tools=(ToolSpec(name="t"),)), {"chat", "tools"}),
    (ProviderOperation.VISION, ChatRequest((Message.user([TextPart("x"), ImagePart(url="https://x.test/a.png")]),)),
     {"chat", "vision", "vision_url"}),
    (ProviderOperation.VISION, ChatRequest((Message.user([TextPart("x"), ImagePart(data=b"\x89PNG")]),)),
     {"chat", "vision", "vision_bytes"}),
    (ProviderOperation.CHAT, ChatRequest(HI, response_schema=SCHEMA), {"chat", "schema"}),
    (ProviderOperation.CHAT, ChatRequest(HI, options={"response_format": "json_object"}), {"chat", "response_format"}),
    (ProviderOperation.COMPLETION, CompletionRequest("x"), {"completion"}),
    (ProviderOperation.EMBEDDING, EmbeddingRequest(("x",)), {"embeddings"}),
], ids=["chat", "tools", "vision", "vision-bytes", "schema", "response_format", "completion", "embeddings"])
def test_the_needs_follow_the_call(operation: ProviderOperation, request_: ProviderRequest, needs: set[str]) -> None:
    assert call_needs(operation, OA, request_) == needs


def test_a_response_format_of_the_named_configuration_is_a_need_too() -> None:
    config = ProviderConfig(identifier="oa", provider="openai", model="gpt", options={"response_format": "json_object"})
    assert call_needs(ProviderOperation.CHAT, config, ChatRequest(HI)) == {"chat", "response_format"}


def test_a_stream_needs_streaming() -> None:
    assert "streaming" in call_needs(ProviderOperation.CHAT, OA, ChatRequest(HI), streaming=True)


def facts(request: ProviderRequest, **fields: Any) -> Any:
    return call_facts(ProviderOperation.CHAT, OA, request, chain=(OA, AN), prices=PriceTable(), known_controls=(),
                      **fields)


def test_the_facts_name_each_configuration_of_the_chain_that_cannot_serve_it() -> None:
    found = facts(ChatRequest(HI, options={"response_format": "json_object"}), capabilities=OFFERED)
    assert dict(found.unmet) == {"an": ("response_format",)}


def test_an_adapter_that_declares_nothing_is_taken_to_offer_no_schema() -> None:
    found = facts(ChatRequest(HI, response_schema=SCHEMA), capabilities={"openai": Capabilities(schema=True)})
    assert (dict(found.unmet), found.response_schema) == ({"an": ("schema",)}, SCHEMA)


def test_a_schema_raises_the_input_bound_by_its_bytes_and_a_tool() -> None:
    plain, structured = facts(ChatRequest(HI)), facts(ChatRequest(HI, response_schema=SCHEMA))
    anthropic = ALLOWANCES["anthropic"]  # the larger allowance of the chain
    tool = anthropic.with_tools + anthropic.per_tool
    assert structured.max_input_tokens - plain.max_input_tokens == len(json.dumps(SCHEMA, separators=(",", ":"))) + tool


def test_the_sizes_and_unmet_needs_are_computed_on_first_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    estimates: list[object] = []

    def estimate(request: object) -> int:
        estimates.append(request)
        return 7

    monkeypatch.setattr("provmw._call.facts.estimate_tokens", estimate)
    found = facts(ChatRequest(HI, options={"response_format": "json_object"}), capabilities=OFFERED)
    assert estimates == []  # a cache hit reads none of them
    assert (found.estimated_input_tokens, dict(found.unmet)) == (7, {"an": ("response_format",)})
    assert found.planned_cost_usd is None and len(estimates) == 1  # the bounds share the sizes
