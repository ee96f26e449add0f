"""Named policies, ``[middleware.guard.policies.NAME]``: what each inherits, how a bad one is refused at
load, and how a call picks one (``controls={"guard_policy": NAME}``) or is refused for naming none."""

from __future__ import annotations

from typing import Any

import pytest
from provmw_guard import GuardMiddleware, GuardOptions, provmw_middleware

from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError, GuardRefusedError
from provmw.messages import Message
from provmw.requests import ChatRequest
from provmw.settings import Settings
from provmw.testing import FakeProvider, ScriptedNext, call_context

from .conftest import CheckServer, Manager

CONFIG = ProviderConfig(identifier="main", provider="openai", model="m")
NO_SSN = {"rule": "no-ssn", "regex": r"\b\d{3}-\d{2}-\d{4}\b"}
STRICT = {"strict": {"deny": [NO_SSN], "max_input_chars": 100}}


def chat(text: str, policy: str | None = None) -> Any:
    controls = {} if policy is None else {"guard_policy": policy}
    return call_context(request=ChatRequest((Message.user(text),)), controls=controls)


def test_a_policy_inherits_the_fields_it_does_not_give() -> None:
    options = GuardOptions(secrets="redact", entities=["email"], policies={"strict": {"max_input_chars": 100}})
    strict = options.policy("strict")
    assert (strict.secrets, strict.entities, strict.max_input_chars) == ("redact", ("email",), 100)


def test_a_field_a_policy_gives_replaces_the_top_level_one() -> None:
    options = GuardOptions(deny=[{"rule": "no-x", "regex": "x"}], policies=STRICT)
    assert [rule.rule for rule in options.policy("strict").deny] == ["no-ssn"]


@pytest.mark.parametrize(("table", "message"), [
    ({"max_input_chars": -1}, "policies.strict.max_input_chars must be an integer > 0, got -1"),
    ({"mode": "loud"}, "policies.strict.mode must be one of enforce, monitor"),
    ({"deny": [{"rule": "r", "regex": "("}]}, "policies.strict.deny[0]: regex is not a regular expression"),
    ({"check": {"base_url": "ftp://x"}}, "policies.strict.check: base_url must be an http(s) URL"),
    ({"max_inptu_chars": 1}, "policies.strict: unknown key 'max_inptu_chars' (did you mean 'max_input_chars'?)"),
    ({"priority": 900}, "policies.strict.priority is the layer's, not a policy's"),
])
def test_a_bad_policy_is_refused_naming_its_field(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        provmw_middleware(Settings(middleware={"guard": {"policies": {"strict": table}}}))
    assert f"[middleware.guard]: {message}" in str(refused.value)


async def test_the_control_picks_the_policy_that_guards_the_call() -> None:
    layer, next = GuardMiddleware(GuardOptions(policies=STRICT)), ScriptedNext()
    await layer.handle(chat("ssn 078-05-1120"), CONFIG, next)
    with pytest.raises(GuardRefusedError) as refused:
        await layer.handle(chat("ssn 078-05-1120", policy="strict"), CONFIG, next)
    assert (refused.value.rule, len(next.calls)) == ("deny:no-ssn", 1)


async def test_a_policy_redacts_by_its_own_entities() -> None:
    layer, next = GuardMiddleware(GuardOptions(policies={"open": {"entities": []}})), ScriptedNext()
    await layer.handle(chat("mail ada@example.com", policy="open"), CONFIG, next)
    assert next.contexts == [None]


async def test_a_monitoring_policy_sends_what_the_top_level_refuses() -> None:
    layer, next = GuardMiddleware(GuardOptions(policies={"learn": {"mode": "monitor"}})), ScriptedNext()
    await layer.handle(chat("deploy with AKIAIOSFODNN7EXAMPLE", policy="learn"), CONFIG, next)
    assert len(next.calls) == 1


async def test_an_unknown_policy_is_refused_unsent_naming_it_and_the_known_ones() -> None:
    layer, next = GuardMiddleware(GuardOptions(mode="monitor", policies=STRICT)), ScriptedNext()
    with pytest.raises(GuardRefusedError) as refused:
        await layer.handle(chat("hello", policy="strcit"), CONFIG, next)
    assert (refused.value.rule, refused.value.stage, next.calls) == ("policy:unknown", "input", [])
    assert "'strcit' is not one of [middleware.guard.policies]: strict" in str(refused.value)


async def test_an_unknown_policy_is_logged_by_rule(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(GuardRefusedError):
        await GuardMiddleware().handle(chat("hello", policy="strict"), CONFIG, ScriptedNext())
    assert "refused rule=policy:unknown stage=input (no policy 'strict')" in caplog.text


async def test_an_unknown_policy_makes_no_upstream_request(manager: Manager, fake: FakeProvider) -> None:
    async with manager(guard={"policies": STRICT}) as built:
        with pytest.raises(GuardRefusedError) as refused:
            await built.chat("hello", controls={"guard_policy": "lenient"})
    assert (refused.value.rule, fake.count()) == ("policy:unknown", 0)


async def test_a_policy_chosen_by_control_refuses_through_the_manager(manager: Manager, fake: FakeProvider) -> None:
    async with manager(guard={"policies": STRICT}) as built:
        await built.chat("ssn 078-05-1120")
        with pytest.raises(GuardRefusedError, match="deny:no-ssn"):
            await built.chat("ssn 078-05-1120", controls={"guard_policy": "strict"})
    assert fake.count() == 1


async def test_a_policys_own_check_judges_only_its_calls(manager: Manager, check_server: CheckServer) -> None:
    policies = {"checked": {"check": {"base_url": check_server.url}}}
    async with manager(guard={"policies": policies}) as built:
        await built.chat("first")
        await built.chat("second", controls={"guard_policy": "checked"})
    assert check_server.bodies == [{"model": "omni-moderation-latest", "input": "second"}]
