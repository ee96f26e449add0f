"""The guard layer against a scripted ``next``: what it hands down, what it hands back, what it refuses
and what it logs."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from provmw_guard import GuardMiddleware, GuardOptions, provmw_middleware

from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError, GuardRefusedError
from provmw.messages import Message
from provmw.requests import ChatRequest
from provmw.responses import CompletionResponse
from provmw.settings import Settings
from provmw.testing import ScriptedNext, call_context

from .analyzers import BrokenAnalyzer, NameAnalyzer

CONFIG = ProviderConfig(identifier="main", provider="openai", model="m")


def chat(text: str, **facts: Any) -> Any:
    return call_context(request=ChatRequest((Message.user(text),)), **facts)


def answer(text: str, **fields: Any) -> CompletionResponse:
    return CompletionResponse(provider="openai", model="m", served_by="main", text=text, **fields)


def sent(next: ScriptedNext) -> str:
    ctx = next.contexts[-1]
    assert ctx is not None and isinstance(ctx.request, ChatRequest)
    return ctx.request.messages[-1].text


async def test_the_redacted_request_is_handed_down_and_the_answer_restored() -> None:
    next = ScriptedNext(answer("to <EMAIL_1>"))
    response = await GuardMiddleware().handle(chat("mail ada@example.com"), CONFIG, next)
    assert sent(next) == "mail <EMAIL_1>" and response.text == "to ada@example.com"


async def test_a_request_with_nothing_to_redact_keeps_its_context() -> None:
    next = ScriptedNext()
    await GuardMiddleware().handle(chat("hello there"), CONFIG, next)
    assert next.contexts == [None]


async def test_a_structured_answer_is_restored_in_its_text_and_parsed_value() -> None:
    ctx = call_context(request=ChatRequest((Message.user("ada@example.com"),), response_schema={"type": "object"}))
    next = ScriptedNext(answer('{"to": "<EMAIL_1>"}', parsed={"to": "<EMAIL_1>"}))
    response = await GuardMiddleware().handle(ctx, CONFIG, next)
    assert (response.text, response.parsed) == ('{"to": "ada@example.com"}', {"to": "ada@example.com"})


async def test_secrets_in_redact_mode_become_placeholders() -> None:
    next = ScriptedNext()
    await GuardMiddleware(GuardOptions(secrets="redact")).handle(chat("key AKIAIOSFODNN7EXAMPLE"), CONFIG, next)
    assert sent(next) == "key <SECRET_1>"


@pytest.mark.parametrize(("options", "text", "rule"), [
    ({"deny": [{"rule": "no-ssn", "regex": r"\b\d{3}-\d{2}-\d{4}\b"}]}, "ssn 078-05-1120", "deny:no-ssn"),
    ({"max_input_chars": 10}, "eleven chars", "size:input"),
    ({}, "-----BEGIN PRIVATE KEY-----\nMIIE", "secret:private_key"),
])
async def test_an_input_policy_refuses_before_sending(options: dict[str, Any], text: str, rule: str) -> None:
    next = ScriptedNext()
    with pytest.raises(GuardRefusedError) as refused:
        await GuardMiddleware(GuardOptions(**options)).handle(chat(text), CONFIG, next)
    assert (refused.value.rule, refused.value.stage, next.calls) == (rule, "input", [])


async def test_an_output_limit_refuses_the_answer() -> None:
    with pytest.raises(GuardRefusedError) as refused:
        await GuardMiddleware(GuardOptions(max_output_chars=1)).handle(chat("hi"), CONFIG, ScriptedNext())
    assert (refused.value.rule, refused.value.stage) == ("size:output", "output")


async def test_monitor_mode_logs_rule_names_and_sends(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="provmw.guard")
    next = ScriptedNext()
    options = GuardOptions(mode="monitor", deny=[{"rule": "no-ada", "regex": "Ada"}])
    await GuardMiddleware(options).handle(chat("Ada AKIAIOSFODNN7EXAMPLE"), CONFIG, next)
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "rule=deny:no-ada" in logged and "rule=secret:aws_access_key_id" in logged and len(next.calls) == 1
    assert "AKIA" not in logged and "Ada" not in logged


async def test_the_log_counts_what_was_redacted_never_the_values(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="provmw.guard")
    await GuardMiddleware().handle(chat("ada@example.com, bob@example.com, 10.0.0.1"), CONFIG, ScriptedNext())
    (record,) = caplog.records
    assert record.getMessage().endswith("redacted EMAIL=2 IP=1") and "example" not in record.getMessage()


async def test_an_analyzer_given_to_the_layer_adds_its_kinds() -> None:
    next = ScriptedNext(answer("hi <PERSON_1>"))
    response = await GuardMiddleware(analyzers=[NameAnalyzer()]).handle(chat("I am Ada Lovelace"), CONFIG, next)
    assert sent(next) == "I am <PERSON_1>" and response.text == "hi Ada Lovelace"


async def test_an_analyzer_named_in_the_settings_is_loaded() -> None:
    next = ScriptedNext()
    layer = GuardMiddleware(GuardOptions(analyzers=["guard_tests.analyzers:NAMES"]))
    await layer.handle(chat("I am Ada Lovelace"), CONFIG, next)
    assert sent(next) == "I am <PERSON_1>"


async def test_an_analyzer_that_fails_refuses_the_call() -> None:
    next = ScriptedNext()
    with pytest.raises(GuardRefusedError) as refused:
        await GuardMiddleware(analyzers=[BrokenAnalyzer()]).handle(chat("hello"), CONFIG, next)
    assert refused.value.rule == "analyzer:BrokenAnalyzer" and next.calls == []


def test_an_analyzer_that_cannot_be_loaded_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="guard_tests.analyzers:Missing"):
        GuardMiddleware(GuardOptions(analyzers=["guard_tests.analyzers:Missing"]))


async def test_an_output_check_judges_the_providers_own_text() -> None:
    seen: list[str] = []

    async def check(text: str) -> str | None:
        seen.append(text)
        return "check:denied" if "EMAIL" in text else None

    options = GuardOptions(check={"base_url": "http://127.0.0.1:9/v1", "stage": "output"})
    with pytest.raises(GuardRefusedError) as refused:
        await GuardMiddleware(options, check=check).handle(chat("ada@example.com"), CONFIG,
                                                           ScriptedNext(answer("<EMAIL_1>")))
    assert seen == ["<EMAIL_1>"] and (refused.value.rule, refused.value.stage) == ("check:denied", "output")


async def test_a_stream_cannot_be_checked_on_output_so_it_is_refused_unsent() -> None:
    async def check(text: str) -> str | None:
        return None

    options = GuardOptions(check={"base_url": "http://127.0.0.1:9/v1", "stage": "both"})
    next = ScriptedNext()
    with pytest.raises(GuardRefusedError, match="check:stream_output"):
        await GuardMiddleware(options, check=check).handle(chat("hi", stream=True), CONFIG, next)
    assert next.calls == []


async def test_redaction_follows_the_chain_to_a_chosen_fallback() -> None:
    chain = (CONFIG, ProviderConfig(identifier="public-backup", provider="openai", model="m"))
    next = ScriptedNext()
    options = GuardOptions(configurations=["public-*"])
    await GuardMiddleware(options).handle(chat("ada@example.com", chain=chain), CONFIG, next)
    assert sent(next) == "<EMAIL_1>"


def test_an_unknown_setting_is_refused_with_a_hint() -> None:
    with pytest.raises(ConfigurationError, match="did you mean 'secrets'"):
        provmw_middleware(Settings(middleware={"guard": {"secret": "block"}}))


async def test_a_check_that_raises_refuses_the_call() -> None:
    async def check(text: str) -> str | None:
        raise RuntimeError(f"cannot judge {text}")

    next = ScriptedNext()
    with pytest.raises(GuardRefusedError) as refused:
        await GuardMiddleware(check=check).handle(chat("hello"), CONFIG, next)
    assert refused.value.rule == "check:unavailable" and next.calls == []


async def test_an_analyzers_failure_is_not_chained_to_the_refusal() -> None:
    with pytest.raises(GuardRefusedError) as refused:
        await GuardMiddleware(analyzers=[BrokenAnalyzer()]).handle(chat("hello"), CONFIG, ScriptedNext())
    assert refused.value.__context__ is None and refused.value.__cause__ is None


@pytest.mark.parametrize(("response_format", "restored"), [
    ({"type": "json_object"}, '{"q": "say \\"hi\\""}'),
    ({"type": "text"}, '{"q": "say "hi""}'),
])
async def test_values_are_escaped_only_in_answers_asked_as_json(response_format: dict[str, str],
                                                                restored: str) -> None:
    request = ChatRequest((Message.user("QUOTE: say \"hi\""),), options={"response_format": response_format})
    layer = GuardMiddleware(GuardOptions(patterns=[{"name": "QUOTE", "regex": 'say "hi"'}]))
    response = await layer.handle(call_context(request=request), CONFIG, ScriptedNext(answer('{"q": "<QUOTE_1>"}')))
    assert response.text == restored
