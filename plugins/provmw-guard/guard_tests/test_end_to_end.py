"""Through a ServiceManager with the guard loaded, against the fake provider on loopback: the provider
sees placeholders, the caller gets the originals back, refusals send nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from provmw_guard import GuardMiddleware

from provmw.errors import GuardRefusedError
from provmw.manager import ServiceManager
from provmw.messages import Message, ToolCall, ToolSpec
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider

from .conftest import Manager, config

TEXT = "mail ada@example.com or call +44 20 7946 0958 about card 4111 1111 1111 1111"


def sent_text(fake: FakeProvider) -> str:
    return json.dumps(fake.received[-1].body)


async def test_the_guard_sits_inside_the_deadline_and_outside_idempotency(manager: Manager) -> None:
    async with manager() as built:
        entry = next(e for e in built.stack if e.name == "guard")
        order = built.pipeline.order
    assert (entry.priority, entry.plugin) == (825, "guard")
    assert order.index("deadline") < order.index("guard") < order.index("idempotency") < order.index("cache")


async def test_the_provider_sees_placeholders_and_the_caller_the_originals(manager: Manager,
                                                                          fake: FakeProvider) -> None:
    async with manager() as built:
        answer = await built.chat(TEXT)
    assert answer.text == f"echo: {TEXT}"
    sent = sent_text(fake)
    assert "ada@example.com" not in sent and "7946" not in sent and "4111" not in sent
    assert "<EMAIL_1>" in sent and "<PHONE_1>" in sent and "<CARD_1>" in sent


async def test_the_same_value_gets_the_same_placeholder_across_messages(manager: Manager,
                                                                        fake: FakeProvider) -> None:
    messages = [Message.system("the customer is ada@example.com"), Message.user("write to ada@example.com")]
    async with manager() as built:
        await built.chat(messages)
    sent = fake.received[-1].body["messages"]
    assert "<EMAIL_1>" in json.dumps(sent[0]) and "<EMAIL_1>" in json.dumps(sent[1])


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 11])
async def test_a_stream_cut_anywhere_is_restored(manager: Manager, size: int) -> None:
    async with manager(model=f"split-{size}") as built:
        chunks = [chunk async for chunk in built.stream_chat(TEXT)]
    assert "".join(c.text for c in chunks) == f"echo: {TEXT}"
    assert all("<" not in c.text for c in chunks)


async def test_a_tool_calls_arguments_are_restored(manager: Manager, fake: FakeProvider) -> None:
    tool = ToolSpec("send_mail", "sends a mail", {"type": "object", "properties": {"to": {"type": "string"}},
                                                  "required": ["to"]})
    async with manager() as built:
        answer = await built.chat_with_tools("ada@example.com", tools=[tool])
    assert answer.tool_calls[0].args == {"to": "ada@example.com"}
    assert "ada@example.com" not in sent_text(fake)


async def test_tool_call_arguments_in_the_history_are_redacted(manager: Manager, fake: FakeProvider) -> None:
    call = ToolCall("c1", "lookup", json.dumps({"email": "ada@example.com", "card": 4111111111111111}))
    messages = [Message.user("find her"), Message.assistant(tool_calls=[call]), Message.tool("c1", "found"),
                Message.user("thanks")]
    async with manager() as built:
        await built.chat(messages)
    history = fake.received[-1].body["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(history) == {"email": "<EMAIL_1>", "card": "<CARD_1>"}


async def test_embeddings_are_sent_redacted(manager: Manager, fake: FakeProvider) -> None:
    async with manager(model="text-embedding-3-small") as built:
        await built.embed(["ada@example.com"])
    assert fake.received[-1].body["input"] == ["<EMAIL_1>"]


async def test_a_secret_is_refused_and_nothing_is_sent(manager: Manager, fake: FakeProvider) -> None:
    async with manager() as built:
        with pytest.raises(GuardRefusedError) as refused:
            await built.chat("my key is AKIAIOSFODNN7EXAMPLE, keep it")
    assert (refused.value.rule, refused.value.stage) == ("secret:aws_access_key_id", "input")
    assert "AKIA" not in str(refused.value) and fake.count() == 0


async def test_a_refusal_is_neither_retried_nor_failed_over(fake: FakeProvider, host: PluginHost) -> None:
    guard = {"deny": [{"rule": "no-echo", "regex": "echo", "stage": "output"}]}
    settings = Settings(configurations={"main": config(fake, fallbacks=("backup",)),
                                        "backup": config(fake, "backup", model="backup-model")},
                        default="main", middleware={"guard": guard})
    async with ServiceManager(settings, host=host) as built:
        with pytest.raises(GuardRefusedError) as refused:
            await built.chat("hello")
    assert (refused.value.rule, refused.value.stage) == ("deny:no-echo", "output")
    assert (fake.count(), fake.count(model="backup-model")) == (1, 0)


@pytest.mark.parametrize(("answer", "rule"), [(None, "check:timeout"), ("not json", "check:invalid_answer"),
                                              ({"results": "maybe"}, "check:invalid_answer")])
async def test_a_check_that_cannot_answer_refuses_before_sending(manager: Manager, fake: FakeProvider,
                                                                 check_server: Any, answer: object, rule: str) -> None:
    check_server.answer = answer  # None: it never answers
    guard = {"check": {"base_url": check_server.url, "timeout_s": 0.2}}
    async with manager(guard=guard) as built:
        with pytest.raises(GuardRefusedError) as refused:
            await built.chat("hello")
    assert (refused.value.rule, fake.count()) == (rule, 0)


async def test_a_check_that_is_down_refuses_before_sending(manager: Manager, fake: FakeProvider,
                                                           closed_port_url: str) -> None:
    async with manager(guard={"check": {"base_url": closed_port_url}}) as built:
        with pytest.raises(GuardRefusedError) as refused:
            await built.chat("hello")
    assert refused.value.rule == "check:unavailable" and fake.count() == 0


async def test_monitor_mode_sends_what_it_would_refuse(manager: Manager, fake: FakeProvider,
                                                       closed_port_url: str) -> None:
    guard = {"mode": "monitor", "check": {"base_url": closed_port_url}}
    async with manager(guard=guard) as built:
        answer = await built.chat("my key is AKIAIOSFODNN7EXAMPLE")
    assert answer.text.startswith("echo:") and fake.count() == 1


async def test_the_check_is_sent_the_redacted_text(manager: Manager, check_server: Any) -> None:
    async with manager(guard={"check": {"base_url": check_server.url}}) as built:
        await built.chat("mail ada@example.com")
    assert check_server.bodies[0]["input"] == "mail <EMAIL_1>"


async def test_a_call_on_a_configuration_not_chosen_is_sent_as_it_is(manager: Manager, fake: FakeProvider) -> None:
    async with manager(guard={"configurations": ["public-*"]}) as built:
        await built.chat("mail ada@example.com")
    assert "ada@example.com" in sent_text(fake)


async def test_only_the_chosen_tenants_are_redacted(manager: Manager, fake: FakeProvider) -> None:
    async with manager(guard={"tenants": ["acme"]}) as built:
        await built.chat("mail ada@example.com", tenant="globex")
        other = sent_text(fake)
        await built.chat("mail ada@example.com", tenant="acme")
    assert "ada@example.com" in other and "ada@example.com" not in sent_text(fake)


def test_the_plugin_builds_its_layer_from_its_section(manager: Manager) -> None:
    built = manager(guard={"secrets": "redact", "entities": ["email"]})
    layer = next(m for m in built.pipeline.middlewares if m.name == "guard")
    assert isinstance(layer, GuardMiddleware) and layer.options.entities == ("email",)


async def test_the_priority_can_be_set_above_the_call_log(manager: Manager) -> None:
    async with manager(guard={"priority": 960}) as built:
        entry = next(e for e in built.stack if e.name == "guard")
    assert entry.priority == 960 and built.pipeline.order[0] == "guard"


async def test_a_cached_answer_is_restored_with_each_callers_own_values(manager: Manager, fake: FakeProvider) -> None:
    cache = {"cache": {"operations": ["chat"]}}
    async with manager(middleware=cache, options={"temperature": 0}) as built:
        first = await built.chat("mail ada@example.com")
        second = await built.chat("mail bob@example.org")
    assert (first.text, second.text) == ("echo: mail ada@example.com", "echo: mail bob@example.org")
    assert second.cached and fake.count() == 1
