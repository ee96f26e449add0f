"""Cache keys: everything that changes the answer changes the key, and the caller's scope always does."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.config import ProviderConfig
from provmw.context import ProviderOperation, scoped_key
from provmw.messages import ImagePart, Message, TextPart, ToolCall, ToolSpec
from provmw.requests import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    _canonical_text,
    _plain,
    is_deterministic,
    merged_options,
    request_digest,
)

CONFIG = ProviderConfig(identifier="p", provider="openai", model="gpt-test", base_url="https://api.test/v1")
CHAT = ChatRequest((Message.system("be brief"), Message.user("hello")), options={"temperature": 0})
OP = ProviderOperation.CHAT
names = st.one_of(st.none(), st.text(max_size=12))


@given(first=st.tuples(names, names), second=st.tuples(names, names), text=st.text(max_size=40))
def test_two_callers_never_share_a_key(first: tuple[str | None, str | None], second: tuple[str | None, str | None],
                                       text: str) -> None:
    digest = request_digest(OP, CONFIG, ChatRequest((Message.user(text),)))
    same = scoped_key(digest, *first) == scoped_key(digest, *second)
    assert same == (first == second)


@given(tenant=names, user=names, text=st.text(max_size=40))
def test_the_same_request_and_caller_give_the_same_key(tenant: str | None, user: str | None, text: str) -> None:
    def key() -> str:
        request = ChatRequest((Message.user(text),), options={"temperature": 0, "seed": 1})
        return scoped_key(request_digest(OP, CONFIG, request), tenant, user)

    assert key() == key()


MUTATIONS: dict[str, Any] = {
    "operation": lambda: request_digest(ProviderOperation.TOOLS, CONFIG, CHAT),
    "provider": lambda: request_digest(OP, attrs.evolve(CONFIG, provider="anthropic"), CHAT),
    "model": lambda: request_digest(OP, attrs.evolve(CONFIG, model="gpt-other"), CHAT),
    "base_url": lambda: request_digest(OP, attrs.evolve(CONFIG, base_url="https://other.test/v1"), CHAT),
    "config option": lambda: request_digest(OP, attrs.evolve(CONFIG, options={"max_tokens": 5}), CHAT),
    "message text": lambda: _chat(messages=(Message.system("be brief"), Message.user("hello!"))),
    "message role": lambda: _chat(messages=(Message.user("be brief"), Message.user("hello"))),
    "message order": lambda: _chat(messages=(Message.user("hello"), Message.system("be brief"))),
    "image part": lambda: _chat(messages=(Message.system("be brief"),
                                          Message.user([TextPart("hello"), ImagePart(url="https://x.test/a.png")]))),
    "image bytes": lambda: _chat(messages=(Message.system("be brief"),
                                           Message.user([TextPart("hello"), ImagePart(data=b"\x89PNG")]))),
    "tool": lambda: _chat(tools=(ToolSpec(name="weather"),)),
    "tool parameters": lambda: _chat(tools=(ToolSpec(name="weather", parameters={"type": "object"}),)),
    "temperature": lambda: _chat(options={"temperature": 0.5}),
    "seed": lambda: _chat(options={"temperature": 0, "seed": 7}),
    "max_tokens": lambda: _chat(options={"temperature": 0, "max_tokens": 10}),
    "response_format": lambda: _chat(options={"temperature": 0, "response_format": {"type": "json_object"}}),
    "stop": lambda: _chat(options={"temperature": 0, "stop": ["\n"]}),
    "response_schema": lambda: _chat(response_schema={"type": "object"}),
    "response_schema property": lambda: _chat(response_schema={"type": "object", "properties": {"a": {}}}),
}


def _chat(**changes: Any) -> str:
    return request_digest(OP, CONFIG, attrs.evolve(CHAT, **changes))


@given(mutation=st.sampled_from(sorted(MUTATIONS)))
def test_every_single_parameter_mutation_changes_the_key(mutation: str) -> None:
    assert MUTATIONS[mutation]() != request_digest(OP, CONFIG, CHAT)


@given(inputs=st.lists(st.text(max_size=10), min_size=1, max_size=4), dimensions=st.integers(1, 4096))
def test_embedding_inputs_and_dimensions_change_the_key(inputs: list[str], dimensions: int) -> None:
    base = request_digest(ProviderOperation.EMBEDDING, CONFIG, EmbeddingRequest(inputs))
    assert base != request_digest(ProviderOperation.EMBEDDING, CONFIG, EmbeddingRequest(inputs, dimensions))
    assert base != request_digest(ProviderOperation.EMBEDDING, CONFIG, EmbeddingRequest([*inputs, "more"]))


def test_the_identifier_and_timeout_do_not_change_the_key() -> None:
    other = attrs.evolve(CONFIG, identifier="q", timeout_s=5)
    assert request_digest(OP, other, CHAT) == request_digest(OP, CONFIG, CHAT)


@pytest.mark.parametrize("credentials", [{"api_key": "sk-other"}, {"api_key": None},
                                         {"headers": {"OpenAI-Organization": "org-b"}}],
                         ids=["another key", "no key", "another account header"])
def test_other_credentials_change_the_key(credentials: dict[str, Any]) -> None:
    mine = attrs.evolve(CONFIG, api_key="sk-mine")
    other = attrs.evolve(mine, identifier="q", **credentials)
    assert request_digest(OP, other, CHAT) != request_digest(OP, mine, CHAT)


def test_the_key_never_contains_the_credentials() -> None:
    config = attrs.evolve(CONFIG, api_key="sk-SENTINEL", headers={"X-Account": "acct-SENTINEL"})
    assert "SENTINEL" not in config.credential_fingerprint
    assert "SENTINEL" not in repr(config) and config.credential_fingerprint not in repr(config)


def test_keys_are_pinned_so_they_are_stable_across_processes_and_versions() -> None:
    # A change here means every deployed shared cache silently goes cold: do it on purpose
    # (0.2.0 did, to bind answers to the credentials that made them).
    digest = request_digest(OP, CONFIG, CHAT)
    assert digest == "2130f2489462c4980fafbc14832934b0912480d08d5fbe08545947b1416ed59a"
    assert scoped_key(digest, "acme", "ada") == hashlib.sha256(
        f'["acme", "ada"]\n{digest}'.encode()).hexdigest()


def test_determinism_is_temperature_zero_or_a_seed() -> None:
    assert is_deterministic(CONFIG, CHAT)
    assert is_deterministic(CONFIG, attrs.evolve(CHAT, options={"temperature": 0.7, "seed": 3}))
    assert not is_deterministic(CONFIG, attrs.evolve(CHAT, options={"temperature": 0.7}))
    assert not is_deterministic(CONFIG, attrs.evolve(CHAT, options={}))
    assert is_deterministic(CONFIG, EmbeddingRequest(["x"]))


@pytest.mark.parametrize("where", ["call", "configuration"])
def test_seed_zero_makes_a_call_deterministic_like_any_seed(where: str) -> None:
    options = {"temperature": 0.7, "seed": 0}
    config = attrs.evolve(CONFIG, options=options) if where == "configuration" else CONFIG
    request = attrs.evolve(CHAT, options=options if where == "call" else {})
    assert is_deterministic(config, request)


def test_the_calls_options_decide_over_the_configurations() -> None:
    config = attrs.evolve(CONFIG, options={"temperature": 0, "seed": 5})
    assert not is_deterministic(config, attrs.evolve(CHAT, options={"temperature": 0.7, "seed": None}))
    assert is_deterministic(attrs.evolve(CONFIG, options={"temperature": 0.7}), CHAT)


def test_credentials_inside_the_base_url_are_part_of_the_fingerprint() -> None:
    one = ProviderConfig(identifier="a", provider="openai", model="m", base_url="https://h.test/v1?key=account-one")
    two = attrs.evolve(one, base_url="https://h.test/v1?key=account-two")
    assert one.credential_fingerprint != two.credential_fingerprint


def _reference_text(operation: ProviderOperation, config: ProviderConfig, request: Any) -> str:
    # The canonical form as first written: sorted-key JSON of the whole, through json.dumps.
    body = request.to_dict()
    if "options" in body:
        body["options"] = _plain(merged_options(config, body["options"]))
    canonical = {"operation": operation.value, "provider": config.provider, "model": config.model,
                 "base_url": config.base_url, "credentials": config.credential_fingerprint, "request": body}
    return json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)
finite_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                                       st.text(max_size=8)),
                             lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                          max_size=3), max_leaves=8)
parts = st.one_of(st.builds(TextPart, st.text(max_size=20)), st.builds(ImagePart, url=st.just("https://x.test/a.png")),
                  st.builds(ImagePart, data=st.binary(min_size=1, max_size=8)))
calls = st.lists(st.builds(ToolCall, st.text(max_size=4), st.text(max_size=4), st.text(max_size=8)), max_size=2)
messages = st.builds(Message, st.sampled_from(["system", "user", "assistant", "tool"]),
                     st.lists(parts, max_size=3).map(tuple), calls.map(tuple), st.none() | st.text(max_size=4))
chats = st.builds(ChatRequest, st.lists(messages, min_size=1, max_size=3).map(tuple),
                  tools=st.lists(st.builds(ToolSpec, name=st.text(min_size=1, max_size=5)), max_size=2).map(tuple),
                  options=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
                  response_schema=st.none() | st.dictionaries(st.text(max_size=5), json_values, max_size=2))
config_options = st.sampled_from([{}, {"temperature": 0, "max_tokens": 512}, {"seed": 7, "top_p": 0.5},
                                  {"stop": ["\n"], "extra_body": {"b": {"a": [1, 2.5, None]}}}])
words = st.text("abcxyz-é", min_size=1, max_size=6)
configs = st.builds(ProviderConfig, identifier=st.just("p"), provider=words, model=words,
                    base_url=st.none() | st.just("https://api.test/v1"), options=config_options)


@given(request=chats, config=configs, operation=st.sampled_from(list(ProviderOperation)))
def test_the_canonical_text_is_the_sorted_json_of_the_whole_request(request: ChatRequest, config: ProviderConfig,
                                                                      operation: ProviderOperation) -> None:
    assert _canonical_text(operation, config, request) == _reference_text(operation, config, request)


@given(inputs=st.lists(st.text(max_size=10), min_size=1, max_size=3), dimensions=st.none() | st.integers(1, 9),
       prompt=st.text(max_size=20), options=config_options)
def test_completions_and_embeddings_keep_their_canonical_text(inputs: list[str], dimensions: int | None,
                                                             prompt: str, options: dict[str, Any]) -> None:
    for request in (EmbeddingRequest(inputs, dimensions), CompletionRequest(prompt, options=options)):
        assert _canonical_text(OP, CONFIG, request) == _reference_text(OP, CONFIG, request)


@given(first=st.tuples(names, names), second=st.tuples(names, names))
def test_the_scope_is_the_json_of_tenant_and_user(first: tuple[str | None, str | None],
                                                  second: tuple[str | None, str | None]) -> None:
    assert scoped_key("d", *first) == hashlib.sha256(f"{json.dumps(list(first))}\nd".encode()).hexdigest()
    assert (scoped_key("d", *first) == scoped_key("d", *second)) == (first == second)


@given(config=configs, options=st.dictionaries(st.text(max_size=8), finite_values, max_size=3),
       other=st.dictionaries(st.text(max_size=8), finite_values, max_size=3), text=st.text(max_size=10))
def test_requests_with_other_options_get_other_keys(config: ProviderConfig, options: dict[str, Any],
                                                    other: dict[str, Any], text: str) -> None:
    def digest(given: dict[str, Any]) -> str:
        return request_digest(OP, config, ChatRequest((Message.user(text),), options=given))

    same_json = _plain(merged_options(config, options)) == _plain(merged_options(config, other))
    assert digest(options) != digest(other) or same_json


@given(requests=st.lists(chats, min_size=2, max_size=4), config=configs, other=configs)
def test_a_configurations_text_written_once_serves_only_it(requests: list[ChatRequest], config: ProviderConfig,
                                                           other: ProviderConfig) -> None:
    for request in requests:  # the second call of each configuration reads its kept text
        for each in (config, other, config):
            assert _canonical_text(OP, each, request) == _reference_text(OP, each, request)
