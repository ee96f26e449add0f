"""ResponsesRequest's validation, needs and canonical form; the items' and the answer's round trips;
the translation to chat and back."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.errors import ConfigurationError, UnsupportedOperationError
from provmw.messages import ImagePart, Message, TextPart, ToolCall, ToolSpec
from provmw.operations import response_types
from provmw.operations.responses_api import (
    UNPRICEABLE,
    FunctionCall,
    FunctionCallOutput,
    MessageItem,
    ReasoningItem,
    ResponsesRequest,
    ResponsesResponse,
    item_from_dict,
)
from provmw.operations.responses_chat import from_completion, to_chat
from provmw.responses import CompletionResponse, Usage

PNG = b"\x89PNG fake bytes"
WEATHER = ToolSpec("weather", "Weather by city", {"type": "object", "properties": {"city": {"type": "string"}}})
PERSON = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}

texts = st.text(max_size=20)
ids = st.text(min_size=1, max_size=12)
parts = st.one_of(st.builds(TextPart, texts), st.builds(ImagePart, url=st.just("https://x.test/a.png")),
                  st.builds(ImagePart, data=st.binary(min_size=1, max_size=16), media_type=st.just("image/jpeg")))
messages = st.builds(MessageItem, st.sampled_from(["user", "system", "developer"]), st.lists(parts, max_size=3))
answers = st.builds(MessageItem, st.just("assistant"), st.lists(st.builds(TextPart, texts), max_size=2),
                    st.one_of(st.none(), ids))
calls = st.builds(FunctionCall, ids, ids, texts, st.one_of(st.none(), ids))
outputs = st.builds(FunctionCallOutput, ids, texts)
reasoning = st.builds(ReasoningItem, ids, st.lists(texts, max_size=2), st.one_of(st.none(), texts))
items = st.one_of(messages, answers, calls, outputs, reasoning)


@pytest.mark.parametrize(("fields", "named"), [
    ({"input": []}, "input must not be empty"),
    ({"input": 3}, "input must be"),
    ({"input": [{"type": "function_call", "name": "f"}]}, r"input\[0\]\.call_id"),
    ({"input": [{"role": "robot", "content": "hi"}]}, "role"),
    ({"input": [{"type": "file", "id": "x"}]}, r"input\[0\]\.type"),
    ({"input": "hi", "instructions": 3}, "instructions"),
    ({"input": "hi", "builtin_tools": ["browser"]}, "builtin_tools"),
    ({"input": "hi", "builtin_tools": ["web_search", "web_search"]}, "builtin_tools"),
    ({"input": "hi", "previous_response_id": ""}, "previous_response_id"),
    ({"input": "hi", "store": "yes"}, "store"),
    ({"input": "hi", "response_schema": {"type": "array"}}, "response_schema"),
    ({"input": "hi", "options": [1]}, "options"),
])
def test_a_wrong_field_is_a_configuration_error_naming_it(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        ResponsesRequest(**fields)


def test_a_string_is_one_user_message_and_dicts_read_as_openai_writes_them() -> None:
    assert ResponsesRequest("hi").input == (MessageItem("user", "hi"),)
    request = ResponsesRequest([{"role": "user", "content": [{"type": "input_text", "text": "a"},
                                                             {"type": "input_image", "image_url": "https://x/p.png"}]},
                                {"type": "function_call_output", "call_id": "c1", "output": "sunny"}])
    assert request.input == (MessageItem("user", (TextPart("a"), ImagePart(url="https://x/p.png"))),
                             FunctionCallOutput("c1", "sunny"))


@pytest.mark.parametrize(("fields", "needs"), [
    ({}, {"chat"}),
    ({"tools": [WEATHER], "response_schema": PERSON}, {"chat", "tools", "schema"}),
    ({"input": [MessageItem("user", (ImagePart(data=PNG),))]}, {"chat", "vision", "vision_bytes"}),
    ({"input": [MessageItem("user", (ImagePart(url="https://x/p.png"),))]}, {"chat", "vision", "vision_url"}),
    ({"builtin_tools": ["web_search", "file_search"]}, {"chat", "web_search", "file_search"}),
    ({"previous_response_id": "resp_1"}, {"chat", "responses"}),
    ({"store": True}, {"chat", "responses"}),
    ({"input": [ReasoningItem("rs_1", encrypted_content="e"), MessageItem("user", "hi")]}, {"chat", "responses"}),
    ({"input": [ReasoningItem("rs_1"), MessageItem("user", "hi")]}, {"chat"}),
])
def test_needs_name_what_a_serving_adapter_must_offer(fields: dict[str, Any], needs: set[str]) -> None:
    request = ResponsesRequest(**{"input": "hi", **fields})
    assert request.needs(streaming=False) == needs
    assert request.needs(streaming=True) == {*needs, "streaming"}


@pytest.mark.parametrize(("fields", "options", "deterministic"), [
    ({}, {"temperature": 0}, True),
    ({}, {"seed": 7}, False),  # the Responses wire takes no seed: a sampled answer is not reproducible
    ({}, {"temperature": 0.7}, False),
    ({"previous_response_id": "resp_1"}, {"temperature": 0}, False),
    ({"store": True}, {"temperature": 0}, False),
    ({"builtin_tools": ["web_search"]}, {"temperature": 0}, False),  # the web changes between calls
])
def test_only_temperature_0_without_stored_state_or_built_in_tools_is_deterministic(
        fields: dict[str, Any], options: dict[str, Any], deterministic: bool) -> None:
    assert ResponsesRequest("hi", **fields).deterministic(options) is deterministic


@pytest.mark.parametrize(("options", "bound"), [
    ({}, None), ({"max_output_tokens": 5, "max_tokens": 50}, 5), ({"max_tokens": 50}, 50),
    ({"max_tokens": 50, "max_completion_tokens": 80}, 80), ({"max_output_tokens": True}, None),
])
def test_the_output_bound_is_max_output_tokens_else_chat_s_names_for_it(options: dict[str, Any],
                                                                        bound: int | None) -> None:
    assert ResponsesRequest("hi").most_output_tokens(options) == bound


@given(st.lists(items, min_size=1, max_size=4))
def test_every_item_reads_back_from_its_dict(given_items: list[Any]) -> None:
    for item in given_items:
        assert item_from_dict(json.loads(json.dumps(item.to_dict()))) == item


@given(st.lists(items, min_size=1, max_size=4), st.one_of(st.none(), texts), st.permutations(
    ["web_search", "file_search", "code_interpreter"]))
def test_to_dict_is_plain_json_and_the_same_for_equal_requests(given_items: list[Any], instructions: str | None,
                                                               builtin: list[str]) -> None:
    request = ResponsesRequest(given_items, instructions=instructions, builtin_tools=builtin)
    same = ResponsesRequest(list(reversed(list(reversed(given_items)))), instructions=instructions,
                            builtin_tools=sorted(builtin))
    assert json.loads(json.dumps(request.to_dict())) == request.to_dict() == same.to_dict()


@given(st.lists(items, min_size=1, max_size=4), st.lists(items, min_size=1, max_size=4))
def test_different_inputs_have_different_canonical_forms(first: list[Any], second: list[Any]) -> None:
    images = [p for i in (*first, *second) if isinstance(i, MessageItem) for p in i.images if p.data is not None]
    if first != second and not images:  # bytes are hashed: only equal bytes have equal digests
        assert ResponsesRequest(first).to_dict() != ResponsesRequest(second).to_dict()


def test_image_bytes_are_in_the_canonical_form_by_their_digest_only() -> None:
    canonical = json.dumps(ResponsesRequest([MessageItem("user", (ImagePart(data=PNG),))]).to_dict())
    assert "sha256" in canonical and "base64" not in canonical


@given(st.lists(items, min_size=1, max_size=4), st.one_of(st.none(), texts))
def test_the_input_bound_is_never_below_the_bytes_of_its_text(given_items: list[Any], instructions: str | None) -> None:
    request = ResponsesRequest(given_items, instructions=instructions)
    assert request.input_bytes() >= sum(len(t.encode()) for t in request.texts())


@given(st.lists(items, min_size=1, max_size=4), st.one_of(st.none(), texts))
def test_texts_replaced_by_themselves_give_the_same_request(given_items: list[Any], instructions: str | None) -> None:
    request = ResponsesRequest(given_items, instructions=instructions)
    assert request.with_texts(request.texts()) == request
    shouted = request.with_texts([t.upper() for t in request.texts()])
    assert shouted.texts() == tuple(t.upper() for t in request.texts())


@given(st.lists(st.one_of(answers, calls, reasoning), max_size=4), st.sampled_from(["stop", "length", None]))
def test_a_response_reads_back_from_its_dict(output: list[Any], finish: str | None) -> None:
    response = ResponsesResponse(provider="openai", model="m", response_id="resp_1", usage=Usage(input_tokens=3),
                                 output=tuple(output), text="t", finish_reason=finish, parsed={"a": [1]},
                                 tool_calls=(ToolCall("c", "f", "{}"),), status="completed")
    assert ResponsesResponse.from_dict(json.loads(json.dumps(response.to_dict()))) == response


def test_the_response_class_is_known_by_its_type() -> None:
    assert response_types()["responses"] is ResponsesResponse


def test_to_chat_puts_instructions_first_and_calls_with_the_turn_that_made_them() -> None:
    request = ResponsesRequest([MessageItem("developer", "be brief"), MessageItem("user", "weather?"),
                                MessageItem("assistant", "checking"), FunctionCall("c1", "weather", '{"city":"Rome"}'),
                                FunctionCall("c2", "weather", '{"city":"Oslo"}'), ReasoningItem("rs_1", ["hm"]),
                                FunctionCallOutput("c1", "sunny"), FunctionCallOutput("c2", "snow")],
                               instructions="You are terse.", tools=[WEATHER], response_schema=PERSON)
    chat = to_chat(request)
    assert [m.role for m in chat.messages] == ["system", "system", "user", "assistant", "tool", "tool"]
    assert chat.messages[3] == Message.assistant("checking", [ToolCall("c1", "weather", '{"city":"Rome"}'),
                                                              ToolCall("c2", "weather", '{"city":"Oslo"}')])
    assert (chat.messages[4].tool_call_id, chat.messages[4].text) == ("c1", "sunny")
    assert (chat.tools, chat.response_schema) == ((WEATHER,), request.response_schema)


def test_to_chat_renames_the_options_a_chat_wire_calls_otherwise() -> None:
    options = {"max_output_tokens": 50, "reasoning": {"effort": "low"}, "truncation": "auto", "temperature": 0}
    chat = to_chat(ResponsesRequest("hi", options=options))
    assert dict(chat.options) == {"max_tokens": 50, "reasoning_effort": "low", "temperature": 0}


@pytest.mark.parametrize("fields", [{"previous_response_id": "resp_1"}, {"store": True},
                                    {"builtin_tools": ["web_search"]}])
def test_what_only_the_native_wire_does_is_not_translated(fields: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedOperationError):
        to_chat(ResponsesRequest("hi", **fields))


def test_from_completion_makes_items_of_the_text_and_the_calls() -> None:
    completion = CompletionResponse(provider="anthropic", model="c", response_id="msg_1", text="let me see",
                                    tool_calls=(ToolCall("t1", "weather", "{}"),), finish_reason="tool_calls",
                                    usage=Usage(input_tokens=5, output_tokens=2), served_by="an")
    answer = from_completion(completion, ResponsesRequest("hi", tools=[WEATHER]))
    assert answer.output == (MessageItem("assistant", "let me see"), FunctionCall("t1", "weather", "{}"))
    assert (answer.text, answer.tool_calls, answer.finish_reason) == ("let me see", completion.tool_calls, "tool_calls")
    assert (answer.status, answer.response_id, answer.usage, answer.served_by) == (
        "completed", "msg_1", completion.usage, "an")


def test_a_cut_completion_is_an_incomplete_response() -> None:
    completion = CompletionResponse(provider="p", model="m", text="echo", finish_reason="length")
    assert from_completion(completion, ResponsesRequest("hi")).status == "incomplete"


def test_from_completion_keeps_what_was_parsed() -> None:
    completion = CompletionResponse(provider="p", model="m", text='{"name": "Ada"}', parsed={"name": "Ada"})
    assert from_completion(completion, ResponsesRequest("hi", response_schema=PERSON)).parsed == {"name": "Ada"}


@pytest.mark.parametrize("options", [{"previous_response_id": "resp_1"}, {"store": True}, {"text": {}},
                                     {"extra_body": {"previous_response_id": "resp_1"}},
                                     {"extra_body": {"max_tool_calls": 50}}, {"extra_body": {"include": []}}])
def test_options_may_not_set_what_the_call_sets_itself(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="options must not set"):
        ResponsesRequest("hi", options=options)


def test_a_continued_call_has_an_unknown_worst_case_that_says_why() -> None:
    request = ResponsesRequest("go on", previous_response_id="resp_1")
    assert "stored conversation" in (request.unknown_worst_case({}) or "")
    assert request.most_units({}) == {UNPRICEABLE: 1.0}  # a unit no price names: a strict limit refuses it


def test_built_in_tools_have_a_known_worst_case_only_with_max_tool_calls() -> None:
    request = ResponsesRequest("hi", builtin_tools=["web_search", "code_interpreter"])
    assert "max_tool_calls" in (request.unknown_worst_case({}) or "")
    assert request.most_units({"max_tool_calls": 3}) == {"web_search_call": 3.0, "code_interpreter_session": 1.0}


@pytest.mark.parametrize(("tool", "units"), [
    ({}, {"code_interpreter_session": 1.0}),  # an automatic container: opened by the call
    ({"container": {"type": "auto", "memory_limit": "4g"}}, {"code_interpreter_session:4g": 1.0}),
    ({"container": "cntr_1"}, {}),  # a container named: billed when it was created
])
def test_a_code_interpreter_is_billed_the_container_it_opens(tool: dict[str, Any], units: dict[str, float]) -> None:
    request = ResponsesRequest("hi", builtin_tools=["code_interpreter"])
    assert request.most_units({"max_tool_calls": 5, "code_interpreter": tool}) == units
