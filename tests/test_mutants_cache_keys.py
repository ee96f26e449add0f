"""The call facts and context behind cache keys, pinned where the mutation run found them unchecked
(docs/testing.md)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from provmw._base.ids import _RandomBytes, new_call_id, new_correlation_id
from provmw._call.facts import estimate_tokens, input_token_bound
from provmw.config import ProviderConfig
from provmw.context import AttemptLog, CallFacts, FrozenMap, ProviderOperation
from provmw.errors import ConfigurationError
from provmw.messages import ImagePart, Message, TextPart, ToolSpec
from provmw.operations.audio import TranscriptionRequest
from provmw.requests import ChatRequest, CompletionRequest, is_deterministic, request_digest
from provmw.testing import call_context
from tests.test_planned_costs import facts

GET = ToolSpec("get")


def test_a_pool_of_random_bytes_hands_out_sixteen_fresh_bytes_before_and_after_a_fork() -> None:
    pool = _RandomBytes()
    before = pool.take()
    pool._forget()  # what os.register_at_fork runs in a child, called here so that the run can see it
    after = pool.take()
    assert (len(before), len(after)) == (16, 16) and before != after


def test_a_chain_bounds_a_call_with_tools_by_its_own_providers_allowance() -> None:
    # Tools are where providers' allowances differ (OpenAI's hidden tool prompt is smaller than Anthropic's).
    request = ChatRequest((Message.user("hi"),), tools=(GET,))
    assert facts(request).max_input_tokens == input_token_bound("openai", request, {"max_tokens": 100}) \
        < input_token_bound("anthropic", request, {"max_tokens": 100})


def test_each_tool_adds_the_providers_allowance_per_tool() -> None:
    one, two = (ChatRequest((Message.user("hi"),), tools=tools) for tools in ((GET,), (GET, GET)))
    tool_json = len(json.dumps(GET.to_dict(), separators=(",", ":")))
    assert input_token_bound("openai", two, {}) - input_token_bound("openai", one, {}) == tool_json + 64


def test_a_prompt_is_estimated_at_four_characters_a_token_in_whole_tokens() -> None:
    assert estimate_tokens(CompletionRequest("x" * 10)) == 3  # 10 // 4 + 1, never a fraction


def test_an_image_is_estimated_as_340_characters_of_text() -> None:
    with_image = ChatRequest((Message.user([TextPart("hi"), ImagePart(url="https://i.test/a.png")]),))
    assert estimate_tokens(with_image) == (2 + 340) // 4 + 1


def test_a_completions_key_holds_its_configurations_options() -> None:
    hot, cold = (ProviderConfig(identifier="c", provider="openai", model="m", options={"temperature": t})
                 for t in (1, 0))
    prompt = CompletionRequest("the same words")
    assert request_digest(ProviderOperation.COMPLETION, hot, prompt) != \
        request_digest(ProviderOperation.COMPLETION, cold, prompt)


def test_a_chat_without_messages_is_refused() -> None:
    with pytest.raises(ConfigurationError) as refused:
        ChatRequest(())
    assert str(refused.value) == "messages must not be empty"


def test_a_message_that_is_not_a_message_is_named_by_its_first_place() -> None:
    with pytest.raises(ConfigurationError) as refused:
        ChatRequest(("hi", "hi"))  # type: ignore[arg-type]
    assert str(refused.value) == "messages[0] must be a Message, got str"


def test_a_schema_and_a_response_format_option_are_refused_together() -> None:
    with pytest.raises(ConfigurationError) as refused:
        ChatRequest((Message.user("hi"),), response_schema={"type": "object"}, options={"response_format": "json"})
    assert str(refused.value) == ("give response_schema or the response_format option, not both: "
                                  "response_schema asks for JSON that follows the schema")


def test_a_requests_options_are_frozen() -> None:
    assert isinstance(ChatRequest((Message.user("hi"),), options={"seed": 1}).options, FrozenMap)


def test_a_configurations_temperature_zero_makes_a_chat_deterministic() -> None:
    cold = ProviderConfig(identifier="c", provider="openai", model="m", options={"temperature": 0})
    assert is_deterministic(cold, ChatRequest((Message.user("hi"),)))


def test_an_operation_beyond_chat_reads_its_configurations_options_for_determinism() -> None:
    hot = ProviderConfig(identifier="c", provider="openai", model="m", options={"temperature": 0.7})
    assert not is_deterministic(hot, TranscriptionRequest(audio=b"RIFF0000WAVE"))


@pytest.mark.parametrize("read", [lambda m: m["tenant"], lambda m: m.get("tenant")])
def test_a_deprecated_metadata_key_still_answers_and_names_the_fact_to_read(read: Any) -> None:
    with pytest.warns(DeprecationWarning, match=r"^ctx\.metadata\['tenant'\] is deprecated: read ctx\.facts\.tenant$"):
        assert read(call_context(tenant="acme").metadata) == "acme"


def test_a_calls_response_schema_is_kept_frozen() -> None:
    schema = CallFacts(response_schema={"type": "object"}).response_schema
    assert isinstance(schema, FrozenMap) and schema == {"type": "object"}


def test_a_calls_attempts_are_numbered_from_one() -> None:
    log = AttemptLog()
    assert (log.number(), log.number()) == (1, 2)


def uuids(make: Callable[[], str]) -> list[uuid.UUID]:
    return [uuid.UUID(hex=make()) for _ in range(64)]


@pytest.mark.parametrize(("make", "version"), [(new_call_id, 7), (new_correlation_id, 4)])
def test_ids_are_uuids_of_their_version_and_the_rfc_variant(make: Callable[[], str], version: int) -> None:
    assert {(u.version, u.variant) for u in uuids(make)} == {(version, uuid.RFC_4122)}


@pytest.mark.parametrize("make", [new_call_id, new_correlation_id])
def test_the_bits_beside_the_version_and_the_variant_stay_random(make: Callable[[], str]) -> None:
    # Over 64 ids a fixed bit shows as one value; a random one takes both (all alike once in 2**63).
    made = [u.bytes for u in uuids(make)]
    assert ({b[6] & 0x01 for b in made}, {b[8] & 0x01 for b in made}) == ({0, 1}, {0, 1})


def test_a_metadata_key_that_is_not_deprecated_is_read_with_get() -> None:
    assert call_context(metadata={"trace": "t1"}).metadata.get("trace") == "t1"
