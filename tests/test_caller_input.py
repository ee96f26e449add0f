"""Caller input is checked at the boundary: a wrong argument is a ConfigurationError naming it,
and nothing is sent (issue #16, finding 6)."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provmw.config import KNOWN_OPTIONS, ProviderConfig
from provmw.errors import ConfigurationError
from provmw.http import HttpClient
from provmw.manager import ServiceManager
from provmw.messages import ImagePart, Message, TextPart, ToolCall, ToolSpec
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import openai_config

NAN, INF = math.nan, math.inf
Call = Callable[[ServiceManager, FakeProvider], Awaitable[object]]


@pytest.fixture
async def manager(fake: FakeProvider, builtin_only: PluginHost) -> AsyncIterator[ServiceManager]:
    settings = Settings(configurations={"oa": openai_config(fake)}, default="oa",
                        middleware={"usage": {"store": "memory"}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        yield manager


def ad_hoc(**fields: Any) -> Call:
    """An ad-hoc chat to the fake with ``fields`` (base_url, api_key, timeout_s) replaced."""
    return lambda m, f: m.chat("hi", provider="openai", model="x", **{"base_url": f.openai_base_url, **fields})


def with_option(name: str, value: object) -> Call:
    return lambda m, f: m.chat("hi", options={name: value})


CALLS: dict[str, tuple[Call, str]] = {
    **{f"{name}={value}": (with_option(name, value), f"options.{name}")
       for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty") for value in (NAN, INF, -INF)},
    "max_tokens=0": (lambda m, f: m.chat("hi", options={"max_tokens": 0}), "options.max_tokens"),
    "max_tokens=-5": (lambda m, f: m.chat("hi", options={"max_tokens": -5}), "options.max_tokens"),
    "temperature=-1": (lambda m, f: m.chat("hi", options={"temperature": -1}), "options.temperature"),
    "stop=[1]": (lambda m, f: m.chat("hi", options={"stop": [1]}), "options.stop"),
    "extra_body NaN": (lambda m, f: m.chat("hi", options={"extra_body": {"x": NAN}}), r"options.extra_body.x"),
    "response_format object": (lambda m, f: m.chat("hi", options={"response_format": {"x": object()}}),
                               "options.response_format.x"),
    "options=[1]": (lambda m, f: m.chat("hi", options=[1]), "options must be a mapping"),  # type: ignore[arg-type]
    "controls=[1]": (lambda m, f: m.chat("hi", controls=[1]), "controls must be a mapping"),  # type: ignore[arg-type]
    "dimensions='x'": (lambda m, f: m.embed("a", dimensions="x"), "dimensions"),  # type: ignore[arg-type]
    "dimensions=-1": (lambda m, f: m.embed("a", dimensions=-1), "dimensions"),
    "dimensions=True": (lambda m, f: m.embed("a", dimensions=True), "dimensions"),
    "messages=123": (lambda m, f: m.chat(123), "messages must be"),  # type: ignore[arg-type]
    "prompt=123": (lambda m, f: m.complete(123), "prompt must be a string"),  # type: ignore[arg-type]
    "vision prompt=1": (lambda m, f: m.vision(1, ["https://x.test/a.png"]), "TextPart.text"),  # type: ignore[arg-type]
    "tools=[1]": (lambda m, f: m.chat_with_tools("hi", [1]), r"tools\[0\] must be a ToolSpec"),  # type: ignore[list-item]
    "tools='abc'": (lambda m, f: m.chat_with_tools("hi", "abc"), "tools must be a list"),  # type: ignore[arg-type]
    "tools=5": (lambda m, f: m.chat_with_tools("hi", 5), "tools must be a list"),  # type: ignore[arg-type]
    "api_key CR LF": (ad_hoc(api_key="sk-1\r\nX-Injected: 1"), "api_key contains a control character"),
    "port 99999": (ad_hoc(base_url="http://127.0.0.1:99999/v1"), "base_url.*65535"),
    "base_url space": (ad_hoc(base_url="http://127.0.0.1:1/v1 x"), "base_url must not contain"),
    "timeout_s NaN": (ad_hoc(timeout_s=NAN), "timeout_s"),
    "timeout_s negative": (ad_hoc(timeout_s=-1.0), "timeout_s"),
}


@pytest.mark.parametrize("case", list(CALLS))
async def test_bad_caller_input_is_a_configuration_error_and_nothing_is_sent(
        manager: ServiceManager, fake: FakeProvider, case: str) -> None:
    call, named = CALLS[case]
    with pytest.raises(ConfigurationError, match=named):
        await call(manager, fake)
    assert fake.count() == 0


PARTS: dict[str, tuple[Callable[[], object], str]] = {
    "text part of an int": (lambda: TextPart(1), "TextPart.text"),  # type: ignore[arg-type]
    "image url of bytes": (lambda: ImagePart(url=b"x"), "url as a string"),  # type: ignore[arg-type]
    "image data of a str": (lambda: ImagePart(data="x"), "data as bytes"),  # type: ignore[arg-type]
    "content of bytes": (lambda: Message("user", b"hi"), "message content must be a list"),  # type: ignore[arg-type]
    "tool_call_id of an int": (lambda: Message("tool", "x", tool_call_id=1), "tool_call_id"),  # type: ignore[arg-type]
    "tool call of a dict": (lambda: Message("assistant", (), ({"id": "1"},)), "ToolCall"),  # type: ignore[arg-type]
    "tool call arguments of a dict": (lambda: ToolCall("1", "f", {"a": 1}), "ToolCall.arguments"),  # type: ignore[arg-type]
    "tool name of an int": (lambda: ToolSpec(1), "ToolSpec.name"),  # type: ignore[arg-type]
    "tool schema of a list": (lambda: ToolSpec("t", parameters=[1]), "ToolSpec.parameters"),  # type: ignore[arg-type]
    "tool schema with NaN": (lambda: ToolSpec("t", parameters={"maximum": NAN}), "ToolSpec.parameters.*JSON"),
}


@pytest.mark.parametrize("case", list(PARTS))
def test_a_message_part_or_tool_of_the_wrong_type_is_refused_where_it_is_built(case: str) -> None:
    build, named = PARTS[case]
    with pytest.raises(ConfigurationError, match=named):
        build()


HEADERS: dict[str, tuple[dict[str, Any], str]] = {
    "CR LF in a header value": ({"headers": {"X-Team": "a\r\nX-Injected: 1"}}, "headers.X-Team"),
    "NUL in a header value": ({"headers": {"X-Team": "a\x00"}}, "headers.X-Team"),
    "LF in a header name": ({"headers": {"X-A\nB": "1"}}, "not a header name"),
    "colon in a header name": ({"headers": {"X-A: B": "1"}}, "not a header name"),
    "LF in the api_key": ({"api_key": "sk-1\nX-Injected: 1"}, "api_key"),
    "port 0": ({"base_url": "http://127.0.0.1:0/v1"}, "base_url"),
    "no host": ({"base_url": "http:///v1"}, "base_url"),
}


@pytest.mark.parametrize("case", list(HEADERS))
def test_a_configuration_that_would_break_the_request_line_or_headers_is_refused(case: str) -> None:
    fields, named = HEADERS[case]
    with pytest.raises(ConfigurationError, match=named):
        ProviderConfig(identifier="x", provider="openai", model="m", **fields)


def test_a_credential_in_a_refused_header_is_not_echoed() -> None:
    with pytest.raises(ConfigurationError) as refused:
        ProviderConfig(identifier="x", provider="openai", model="m", api_key="sk-SECRET\r\n")
    assert "sk-SECRET" not in str(refused.value)


async def test_a_body_holding_nan_is_a_configuration_error_and_is_not_sent(
        http: HttpClient, fake: FakeProvider) -> None:
    with pytest.raises(ConfigurationError, match="cannot be sent as JSON"):
        await http.post_json(f"{fake.openai_base_url}/chat/completions", {"model": "m", "temperature": NAN}, {})
    assert fake.count() == 0


async def test_valid_options_at_their_bounds_still_go_out(manager: ServiceManager, fake: FakeProvider) -> None:
    options = {"temperature": 0, "top_p": 1, "max_tokens": 1, "stop": ["\n"], "extra_body": {"user": "u"}}
    await manager.chat("hi", options=options)
    assert {k: fake.received[0].body[k] for k in ("temperature", "top_p", "max_tokens")} == {
        "temperature": 0, "top_p": 1, "max_tokens": 1}


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6), st.binary(max_size=3))
garbage = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(st.text(max_size=6), st.integers()), inner, max_size=3)),
    max_leaves=8)
# Not the time limits: a valid, tiny deadline_s rightly ends the call with a timeout.
CONTROLS = ["no_cache", "no_store", "ttl_s", "namespace", "max_attempts", "bogus"]
GARBAGE: dict[str, st.SearchStrategy[Any]] = {
    "options": st.one_of(garbage, st.dictionaries(st.sampled_from([*KNOWN_OPTIONS, "temprature"]), garbage,
                                                  max_size=2)),
    "controls": st.one_of(garbage, st.dictionaries(st.sampled_from(CONTROLS), garbage, max_size=2)),
    "messages": st.one_of(garbage, st.lists(st.one_of(st.text(max_size=5).map(Message.user), garbage), max_size=3)),
}


@pytest.mark.parametrize("argument", list(GARBAGE))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
async def test_garbage_input_is_refused_or_sent_as_valid_json(
        manager: ServiceManager, fake: FakeProvider, argument: str, data: st.DataObject) -> None:
    value = data.draw(GARBAGE[argument])
    seen = fake.count()
    try:
        await (manager.chat(value) if argument == "messages" else manager.chat("hi", **{argument: value}))
    except ConfigurationError:
        assert fake.count() == seen
    for received in list(fake.received)[seen:]:
        json.dumps(received.body, allow_nan=False)  # the fake read NaN back as nan: this would raise
