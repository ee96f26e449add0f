"""Completion and embedding requests keyed by their own fields, list options by their items; malformed requests
refused with what was wrong; a context's metadata answers a default."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from provmw.config import ProviderConfig
from provmw.context import ProviderOperation
from provmw.errors import ConfigurationError
from provmw.messages import Message
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest, _canonical_text, request_digest
from provmw.testing import call_context

CONFIG = ProviderConfig(identifier="p", provider="openai", model="gpt-test", base_url="https://api.test/v1")


def canonical(operation: ProviderOperation, request: dict[str, Any]) -> str:
    return json.dumps({"base_url": "https://api.test/v1", "credentials": CONFIG.credential_fingerprint,
                       "model": "gpt-test", "operation": operation.value, "provider": "openai", "request": request},
                      sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def test_a_completion_is_keyed_by_its_prompt_and_merged_options() -> None:
    request = CompletionRequest("once upon", options={"max_tokens": 5})
    assert _canonical_text(ProviderOperation.COMPLETION, CONFIG, request) == \
        canonical(ProviderOperation.COMPLETION, {"options": {"max_tokens": 5}, "prompt": "once upon"})


def test_an_embedding_is_keyed_by_its_inputs_and_dimensions() -> None:
    request = EmbeddingRequest(("a", "b"), dimensions=8)
    assert _canonical_text(ProviderOperation.EMBEDDING, CONFIG, request) == \
        canonical(ProviderOperation.EMBEDDING, {"dimensions": 8, "inputs": ["a", "b"]})


@pytest.mark.parametrize(("build", "message"), [
    (lambda: EmbeddingRequest(()), "inputs must hold at least one string"),
    (lambda: EmbeddingRequest("abc"), "inputs must be a list of str, got str"),
    (lambda: CompletionRequest(5), "prompt must be a string, got int"),  # type: ignore[arg-type]
    (lambda: EmbeddingRequest(("a",), dimensions=True), "dimensions must be a positive integer, got True"),
    (lambda: EmbeddingRequest(("a",), dimensions=0), "dimensions must be a positive integer, got 0"),
    (lambda: EmbeddingRequest(("a",), dimensions=1.5), "dimensions must be a positive integer, got 1.5"),  # type: ignore[arg-type]
])
def test_a_malformed_request_is_refused_saying_what_was_wrong(build: Any, message: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        build()
    assert str(refused.value) == message


def test_one_dimension_is_a_valid_size() -> None:
    assert EmbeddingRequest(("a",), dimensions=1).dimensions == 1


def test_options_holding_lists_are_keyed_by_their_items() -> None:
    config = ProviderConfig(identifier="p", provider="openai", model="m")
    one, other = (ChatRequest((Message.user("hi"),), options={"stop": [word]}) for word in ("end", "halt"))
    assert request_digest(ProviderOperation.CHAT, config, one) != request_digest(ProviderOperation.CHAT, config, other)


def test_metadata_get_returns_the_default_for_a_missing_key() -> None:
    assert call_context(metadata={"plugin": 1}).metadata.get("absent", "fallback") == "fallback"



def test_metadata_holds_what_a_plugin_put_there_and_nothing_else() -> None:
    metadata = call_context(metadata={"plugin": 1}).metadata
    assert ("plugin" in metadata, "absent" in metadata) == (True, False)


@pytest.mark.parametrize("options", [{"t": math.inf}, {"t": -math.inf}, {1: "x", "b": 2}, {1: "y", "b": 2},
                                     {"flag": True, "n": None, "f": 0.5, "i": 3, "s": "é"}])
def test_a_chats_options_are_keyed_as_the_sorted_json_of_them(options: dict[Any, Any]) -> None:
    request = ChatRequest((Message.user("hi"),), options=options)
    expected = {"messages": [m.to_dict() for m in request.messages], "tools": [],
                "options": {str(name): value for name, value in options.items()}}
    assert _canonical_text(ProviderOperation.CHAT, CONFIG, request) == canonical(ProviderOperation.CHAT, expected)
