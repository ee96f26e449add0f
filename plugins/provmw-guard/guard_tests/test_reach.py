"""What the guard reaches: a pool's deployments, what a request sends besides its messages, and where it
may stand in the stack."""

from __future__ import annotations

import json

import pytest
from provmw_guard import GuardOptions

from provmw.errors import ConfigurationError, GuardRefusedError
from provmw.manager import ServiceManager
from provmw.messages import ToolSpec
from provmw.plugins import PluginHost
from provmw.pools import Pool
from provmw.settings import Settings
from provmw.testing import FakeProvider

from .conftest import Manager, config

KEY = "sk-proj-abc123DEF456ghi789JKL012mno345"


async def test_a_pool_of_external_deployments_is_redacted(fake: FakeProvider, host: PluginHost) -> None:
    settings = Settings(configurations={"external-oa": config(fake, identifier="external-oa")},
                        pools={"gpt": Pool(name="gpt", members=("external-oa",))}, default="gpt",
                        middleware={"guard": {"configurations": ["external-*"]}})
    async with ServiceManager(settings, host=host) as manager:
        answer = await manager.chat("write to ada@example.com")
    assert "ada@example.com" not in json.dumps(fake.received[-1].body)
    assert answer.text == "echo: write to ada@example.com"


async def test_a_secret_in_the_options_is_refused_unsent(manager: Manager, fake: FakeProvider) -> None:
    async with manager() as built:
        with pytest.raises(GuardRefusedError) as refused:
            await built.chat("hello", options={"extra_body": {"note": KEY}})
    assert (refused.value.rule, fake.count()) == ("secret:openai_key", 0)


async def test_a_secret_in_a_tool_description_is_refused_even_when_secrets_are_redacted(
        manager: Manager, fake: FakeProvider) -> None:
    tool = ToolSpec(name="lookup", description=f"use key {KEY}", parameters={"type": "object"})
    async with manager(guard={"secrets": "redact"}) as built:
        with pytest.raises(GuardRefusedError, match="secret:openai_key"):
            await built.chat_with_tools("hello", [tool])
    assert fake.count() == 0


async def test_a_deny_pattern_reads_the_options_too(manager: Manager, fake: FakeProvider) -> None:
    deny = [{"rule": "no-project-x", "regex": "project-x"}]
    async with manager(guard={"deny": deny}) as built:
        with pytest.raises(GuardRefusedError, match="deny:no-project-x"):
            await built.chat("hello", options={"metadata": {"topic": "project-x"}})
    assert fake.count() == 0


def test_a_priority_below_the_stores_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="priority must be above 810"):
        GuardOptions(priority=800)
