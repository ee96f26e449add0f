"""The input-token bound of a request, worked out by hand: its text in UTF-8 bytes, its options' JSON, and
each provider's allowances per request, message, image and tool; and the cache TTL its options ask for."""

from __future__ import annotations

import json
import types
from typing import Any

import pytest

from provmw._call.facts import cache_write_ttl, input_token_bound
from provmw.messages import ImagePart, Message, TextPart, ToolCall, ToolSpec
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest

HELLO = ChatRequest((Message.system("sys"), Message.user("héllo")))  # 3 + 6 bytes, 2 messages
TOOL = ToolSpec("get", description="météo")


def json_bytes(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def test_a_chat_counts_its_text_in_bytes_and_each_message() -> None:
    assert input_token_bound("openai", HELLO, {}) == 9 + 16 + 8 * 2


def test_tool_calls_and_their_ids_count_as_text() -> None:
    turns = (Message.user("hi"), Message.assistant(tool_calls=[ToolCall("call_1", "get", "{}")]),
             Message.tool("call_1", "ok"))
    assert input_token_bound("openai", ChatRequest(turns), {}) == (2 + (6 + 3 + 2) + (2 + 6)) + 16 + 8 * 3


def test_a_tool_counts_its_json_and_the_hidden_tool_prompt() -> None:
    request = ChatRequest((Message.user("hi"),), tools=(TOOL,))
    assert input_token_bound("anthropic", request, {}) == 2 + json_bytes(TOOL.to_dict()) + 16 + 8 + 600 + 64


def test_a_response_schema_counts_as_one_tool() -> None:
    request = ChatRequest((Message.user("hi"),), response_schema={"type": "object", "title": "été"})
    assert input_token_bound("openai", request, {}) == 2 + json_bytes({"type": "object", "title": "été"}) \
        + 16 + 8 + 256 + 64


def test_an_image_counts_the_most_it_can_and_an_unknown_provider_the_largest_allowance() -> None:
    request = ChatRequest((Message.user([TextPart("hi"), ImagePart(url="https://i.test/a.png")]),))
    assert input_token_bound("anthropic", request, {}) == 2 + 16 + 8 + 5_000
    assert input_token_bound("other", request, {}) == 2 + 16 + 8 + 48_200


def test_options_count_as_the_json_that_is_sent() -> None:
    options: dict[str, Any] = {"max_tokens": 5, "extra": types.MappingProxyType({"note": "ça"}), "when": object}
    sent = {"max_tokens": 5, "extra": {"note": "ça"}, "when": str(object)}
    assert input_token_bound("openai", HELLO, options) == 9 + json_bytes(sent) + 16 + 8 * 2


def test_embeddings_and_completions_count_each_input_as_a_message() -> None:
    assert input_token_bound("openai", EmbeddingRequest(("ab", "cé")), {}) == 5 + 16 + 8 * 2
    assert input_token_bound("openai", CompletionRequest("abc"), {}) == 3 + 16 + 8


@pytest.mark.parametrize(("options", "ttl"), [
    ({}, None),
    ({"extra_body": {"system": [{"type": "text", "cache_control": {"type": "ephemeral"}}]}}, "5m"),
    ({"extra_body": {"cache_control": {"type": "ephemeral", "ttl": "5m"}}}, "5m"),
    ({"extra_body": ({"cache_control": {"type": "ephemeral", "ttl": "1h"}},)}, "1h"),
    ({"a": {"cache_control": {"type": "ephemeral"}}, "b": [[{"cache_control": {"ttl": "1h"}}]]}, "1h"),
    ({"extra_body": {"cache_control": "ephemeral"}}, "1h"),  # unreadable: the dearer TTL
])
def test_the_cache_ttl_options_ask_for_is_the_longest_anywhere_in_them(options: dict[str, Any], ttl: str) -> None:
    assert cache_write_ttl(options) == ttl
