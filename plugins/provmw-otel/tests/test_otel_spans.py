"""The span tree: a call span, one child per attempt in ``response.attempts``, a cache hit as an
event, refusals as ``error.type``; redaction, content and traceparent only when asked."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import StatusCode
from otel_harness import KEY, fake_provider, manager, recording, run, tree  # noqa: F401  (a fixture)
from provmw_otel.options import OtelOptions

from provmw.errors import BudgetExceededError
from provmw.responses import ProviderResponse
from provmw.testing import FakeProvider


async def test_a_plain_call_is_a_client_span_named_operation_and_model_with_one_child(fake: FakeProvider) -> None:
    with recording() as rec:
        await run("plain", fake, rec.telemetry)
        root, children = tree(rec.finished())
    assert (root.name, root.kind, len(children)) == ("chat gpt-test", trace.SpanKind.CLIENT, 1)
    assert root.attributes is not None and root.attributes["gen_ai.usage.output_tokens"] == 3


async def test_the_request_options_are_the_attempts_and_who_served_the_calls(fake: FakeProvider) -> None:
    with recording() as rec:
        await run("plain", fake, rec.telemetry)
        root, [attempt] = tree(rec.finished())
    call, tried = set(root.attributes or {}), set(attempt.attributes or {})
    each_attempts = {"gen_ai.system", "gen_ai.request.temperature"}
    assert each_attempts <= tried and not each_attempts & call
    assert {"provmw.served_by", "provmw.cached"} <= call and not {"provmw.served_by", "provmw.cached"} & tried


async def test_each_attempt_is_a_sibling_span_matching_response_attempts(fake: FakeProvider) -> None:
    with recording() as rec:
        response = await run("failover", fake, rec.telemetry)
        _, children = tree(rec.finished())
    assert isinstance(response, ProviderResponse)
    seen = [(s.attributes or {}).get("provmw.configuration") for s in sorted(children, key=lambda s: s.start_time or 0)]
    assert seen == [a.config_id for a in response.attempts] == ["oa", "an"]
    assert [(s.attributes or {}).get("error.type") for s in children] == [a.error_type for a in response.attempts]


async def test_a_retried_attempt_carries_its_status_and_error_type(fake: FakeProvider) -> None:
    with recording() as rec:
        await run("retried", fake, rec.telemetry)
        _, children = tree(rec.finished())
    failed = [s for s in children if s.status.status_code is StatusCode.ERROR]
    assert [(s.attributes or {}).get("provmw.status_code") for s in failed] == [503]
    assert len(children) == 2


async def test_a_cache_hit_is_an_event_on_the_call_span_with_no_child(fake: FakeProvider) -> None:
    with recording() as rec:
        await run("cache_hit", fake, rec.telemetry)
        hit = rec.finished()[-1]
    assert [e.name for e in hit.events] == ["provmw.cache_hit"]
    assert not [s for s in rec.finished() if s.parent and s.parent.span_id == hit.context.span_id]
    assert hit.attributes is not None and "gen_ai.usage.input_tokens" not in hit.attributes


async def test_a_budget_refusal_sets_error_type_to_the_provmw_error_class(fake: FakeProvider) -> None:
    with recording() as rec:
        error = await run("budget_refusal", fake, rec.telemetry)
        [span] = rec.finished()
    assert isinstance(error, BudgetExceededError)
    assert span.attributes is not None and span.attributes["error.type"] == "BudgetExceededError"
    assert span.status.status_code is StatusCode.ERROR and fake.count() == 0


async def test_tenant_and_user_are_redacted_as_the_call_log_redacts_them(fake: FakeProvider) -> None:
    with recording() as rec:
        await run("plain", fake, rec.telemetry)
        root, _ = tree(rec.finished())
    assert root.attributes is not None
    assert (root.attributes["provmw.user"], root.attributes["provmw.tenant"]) == ("[email]", "[phone]")


async def test_no_key_and_no_message_text_reach_any_span_by_default(fake: FakeProvider) -> None:
    with recording() as rec:
        await run("plain", fake, rec.telemetry)
        dumped = " ".join(s.to_json() for s in rec.finished())
    assert KEY not in dumped and "hi there" not in dumped and "ada@example.com" not in dumped


async def test_capture_content_records_the_answer_redacted(fake: FakeProvider) -> None:
    with recording() as rec:
        async with manager(fake, rec.telemetry, OtelOptions(capture_content=True)) as m:
            await m.chat("mail ada@example.com")
        root, _ = tree(rec.finished())
    assert root.attributes is not None
    messages = str(root.attributes["gen_ai.output.messages"])
    assert "[email]" in messages and "ada@example.com" not in messages


async def test_the_call_span_is_a_child_of_the_callers_span(fake: FakeProvider) -> None:
    with recording() as rec:
        tracer = rec.tracer_provider.get_tracer("app")
        async with manager(fake, rec.telemetry) as m:
            with tracer.start_as_current_span("request") as outer:
                await m.chat("hi")
        calls = [s for s in rec.finished() if s.name == "chat gpt-test" and s.parent
                 and s.parent.span_id == outer.get_span_context().span_id]
    assert len(calls) == 1


async def test_no_traceparent_is_sent_unless_a_setting_names_the_configuration(fake: FakeProvider) -> None:
    with recording() as rec:
        async with manager(fake, rec.telemetry) as m:
            await m.chat("hi")
    assert "traceparent" not in {name.lower() for name in fake.received[-1].headers}


async def test_traceparent_names_the_attempt_span_when_enabled(fake: FakeProvider) -> None:
    with recording() as rec:
        async with manager(fake, rec.telemetry, OtelOptions(traceparent_to=["oa"])) as m:
            await m.chat("hi")
        _, [attempt] = tree(rec.finished())
    sent = {name.lower(): value for name, value in fake.received[-1].headers.items()}["traceparent"]
    assert sent.split("-")[2] == format(attempt.context.span_id, "016x")
