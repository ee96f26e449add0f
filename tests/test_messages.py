"""Messages are taken in provmw's own dict form and in OpenAI's chat message shape (issue #21, item 5)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.errors import ConfigurationError, InvalidDataError
from provmw.manager import ServiceManager
from provmw.messages import ImagePart, Message, TextPart, ToolCall, ToolSpec, messages_from, tools_from
from provmw.plugins import PluginHost
from provmw.providers.openai import _message as openai_wire
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, openai_config

PNG = b"\x89PNG\r\n\x1a\n"
CALL = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}


@pytest.fixture
async def manager(fake: FakeProvider, builtin_only: PluginHost) -> AsyncIterator[ServiceManager]:
    settings = Settings(configurations={"oa": openai_config(fake)}, middleware=BUILTIN_MIDDLEWARE_OFF)
    async with ServiceManager(settings, host=builtin_only) as manager:
        yield manager


def test_a_string_content_is_one_text_part() -> None:
    assert Message.from_dict({"role": "user", "content": "hi"}) == Message.user("hi")


def test_openai_parts_become_text_and_image_parts() -> None:
    message = Message.from_dict({"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}},
    ]})
    assert message == Message.user([TextPart("what is this?"), ImagePart(url="https://example.com/cat.png")])


def test_an_openai_data_url_becomes_image_bytes() -> None:
    url = "data:image/jpeg;base64,iVBORw0KGgo="
    message = Message.from_dict({"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]})
    assert message.images == (ImagePart(data=PNG, media_type="image/jpeg"),)


def test_an_openai_assistant_turn_with_tool_calls_and_no_content() -> None:
    message = Message.from_dict({"role": "assistant", "content": None, "tool_calls": [CALL]})
    assert message == Message.assistant(tool_calls=[ToolCall("call_1", "weather", '{"city": "Oslo"}')])


def test_an_openai_tool_result() -> None:
    message = Message.from_dict({"role": "tool", "tool_call_id": "call_1", "content": "12 C"})
    assert message == Message.tool("call_1", "12 C")


def test_the_developer_role_is_the_system_turn() -> None:
    assert Message.from_dict({"role": "developer", "content": "be brief"}) == Message.system("be brief")


@pytest.mark.parametrize(("value", "field"), [
    ({"content": "hi"}, r"messages\[1\]\.role must be a str, got nothing"),
    ({"role": "robot", "content": "hi"}, r"messages\[1\]\.role must be one of"),
    ({"role": "user", "content": 5}, r"messages\[1\]\.content must be a list, got int"),
    ({"role": "user", "content": [{"type": "text", "text": 5}]}, r"messages\[1\]\.content\[0\]\.text must be a str"),
    ({"role": "user", "content": [{"type": "audio"}]}, r"messages\[1\]\.content\[0\]\.type must be text, image_url"),
    ({"role": "user", "content": [{"type": "image_url", "image_url": {}}]},
     r"messages\[1\]\.content\[0\]\.image_url\.url must be a str"),
    ({"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]},
     r"messages\[1\]\.tool_calls\[0\]\.function\.name must be a str"),
    ({"role": "tool", "tool_call_id": 7, "content": "x"}, r"messages\[1\]\.tool_call_id must be a str"),
    ("hi", r"messages\[1\] must be a message dict"),
])
def test_a_bad_field_is_a_configuration_error_naming_it(value: object, field: str) -> None:
    with pytest.raises(ConfigurationError, match=field):
        messages_from([Message.user("first"), value])


texts = st.text(min_size=1, max_size=20)
calls = st.builds(ToolCall, id=texts, name=texts, arguments=st.sampled_from(["{}", '{"a": 1}']))
messages = st.one_of(
    st.builds(Message.system, texts),
    st.builds(Message.user, texts),
    st.builds(lambda t: Message.user([TextPart(t), ImagePart(data=PNG, media_type="image/png")]), texts),
    st.builds(Message.assistant, texts),
    st.builds(lambda cs: Message.assistant(tool_calls=cs), st.lists(calls, min_size=1, max_size=3)),
    st.builds(Message.tool, texts, texts),
)


@given(messages)
def test_provmw_dicts_round_trip(message: Message) -> None:
    assert Message.from_dict(json.loads(json.dumps(message.to_dict()))) == message


@given(messages)
def test_what_the_openai_adapter_sends_reads_back_as_the_same_message(message: Message) -> None:
    assert Message.from_dict(json.loads(json.dumps(openai_wire(message)))) == message


async def test_chat_takes_openai_message_dicts(manager: ServiceManager, fake: FakeProvider) -> None:
    answer = await manager.chat([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
    assert answer.text == "echo: hi"
    assert fake.received[0].body["messages"] == [{"role": "system", "content": "be brief"},
                                                 {"role": "user", "content": "hi"}]


async def test_a_tool_conversation_in_openai_dicts_goes_out_as_written(
        manager: ServiceManager, fake: FakeProvider) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "weather in Oslo?"},
                                     {"role": "assistant", "content": None, "tool_calls": [CALL]},
                                     {"role": "tool", "tool_call_id": "call_1", "content": "12 C"}]
    await manager.chat_with_tools(history, [ToolSpec("weather")])
    assert fake.received[0].body["messages"] == history


async def test_a_bad_message_dict_sends_nothing(manager: ServiceManager, fake: FakeProvider) -> None:
    with pytest.raises(ConfigurationError, match=r"messages\[0\]\.content\[0\]\.text"):
        await manager.chat([{"role": "user", "content": [{"type": "text"}]}])
    assert fake.count() == 0


CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
WEATHER = {"type": "function", "function": {"name": "weather", "description": "Weather for a city", "parameters": CITY}}


def test_an_openai_tool_dict_is_the_same_tool_spec() -> None:
    spec = ToolSpec("weather", "Weather for a city", CITY)
    assert tools_from([WEATHER]) == (spec,)
    assert tools_from([spec.to_dict()]) == (spec,)


async def test_chat_with_tools_takes_openai_tool_dicts(manager: ServiceManager, fake: FakeProvider) -> None:
    await manager.chat_with_tools("weather in Oslo?", [WEATHER])
    assert fake.received[0].body["tools"] == [WEATHER]


async def test_a_bad_tool_dict_names_its_place_and_sends_nothing(manager: ServiceManager, fake: FakeProvider) -> None:
    with pytest.raises(ConfigurationError, match=r"tools\[1\]\.function\.name must be a str, got nothing"):
        await manager.chat_with_tools("hi", [WEATHER, {"type": "function", "function": {"description": "x"}}])
    with pytest.raises(ConfigurationError, match=r"tools\[0\]\.type must be 'function', got 'retrieval'"):
        await manager.chat_with_tools("hi", [{"type": "retrieval", "function": {"name": "x"}}])
    assert fake.count() == 0


def test_a_tool_calls_args_are_its_decoded_json_object() -> None:
    assert ToolCall(id="1", name="get_weather", arguments='{"city": "Paris"}').args == {"city": "Paris"}


@pytest.mark.parametrize(("arguments", "wrong"), [("{oops", "not JSON"), ("[1, 2]", "JSON list, not an object")])
def test_a_tool_calls_args_name_the_tool_when_they_are_not_a_json_object(arguments: str, wrong: str) -> None:
    with pytest.raises(InvalidDataError, match=f"'get_weather' has arguments that are {wrong}"):
        ToolCall(id="1", name="get_weather", arguments=arguments).args  # noqa: B018
