"""The "did you mean" of an unknown call argument: a slip of a known name, never a far neighbour."""

from __future__ import annotations

import pytest

from provmw._call.arguments import call_options
from provmw.errors import UnknownArgumentError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import openai_config

# name given -> the hint it gets ("" for none): typos and shortenings get their name; names that
# only share a part with a known one (tools / controls, api_base / api_key) get none.
HINTS = [
    ("temprature", "did you mean 'temperature'"),
    ("max_token", "did you mean 'max_tokens'"),
    ("configration", "did you mean 'configuration'"),
    ("config", "did you mean 'configuration'"),
    ("timeout", "did you mean 'timeout_s'"),
    ("tenant_id", "did you mean 'tenant'"),
    ("response_shema", "did you mean 'response_schema'"),
    ("tools", "an argument of chat_with_tools and stream_chat_with_tools"),
    ("response_schema", "an argument of chat, chat_with_tools, stream_chat and stream_chat_with_tools"),
    ("dimensions", "an argument of embed"),
    ("option", "did you mean 'options'"),
    ("api_base", ""),
    ("stop_sequences", ""),
]


@pytest.mark.parametrize(("name", "hint"), HINTS)
def test_an_unknown_argument_gets_its_hint_or_none(name: str, hint: str) -> None:
    with pytest.raises(UnknownArgumentError, match=f"unknown argument '{name}'") as caught:
        call_options(None, {name: 1})
    assert hint in str(caught.value) if hint else "did you mean" not in str(caught.value)


async def test_a_schema_given_to_complete_is_pointed_to_chat_and_nothing_is_sent(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(Settings(configurations={"oa": openai_config(fake)}), host=builtin_only) as manager:
        with pytest.raises(UnknownArgumentError, match="'response_schema' for this call: it is an argument of chat"):
            await manager.complete("Paris", response_schema={"type": "object"})  # type: ignore[call-arg]
    assert fake.count() == 0
