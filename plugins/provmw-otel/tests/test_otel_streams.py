"""Streamed calls over real HTTP: both spans end when the stream ends (completed, failed after
its first chunk, or abandoned), with what the stream's end says; time to first chunk at open."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.trace import StatusCode
from otel_harness import Recorded, fake_provider, manager, points, recording, tree  # noqa: F401  (a fixture)

from provmw.errors import StreamInterruptedError
from provmw.testing import FakeProvider, Fault


def both(rec: Recorded) -> tuple[ReadableSpan, ReadableSpan]:
    """The call span and its one attempt span."""
    call, [attempt] = tree(rec.finished())
    return call, attempt


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_both_spans_stay_open_until_the_stream_ends(fake: FakeProvider) -> None:
    with recording() as rec:
        async with manager(fake, rec.telemetry) as m:
            stream = m.stream_chat("one two three four")
            first = await anext(stream)
            open_after_first_chunk = rec.finished()
            rest = [c async for c in stream]
        assert first.text and rest
        assert open_after_first_chunk == () and len(rec.finished()) == 2


async def test_a_completed_stream_puts_the_reported_usage_and_finish_reason_on_both_spans(
        fake: FakeProvider) -> None:
    with recording() as rec:
        async with manager(fake, rec.telemetry) as m:
            chunks = [c async for c in m.stream_chat("stream me")]
        usage = chunks[-1].usage
        assert usage is not None
        for span in both(rec):
            assert (attributes(span)["gen_ai.usage.output_tokens"], attributes(span)["gen_ai.response.finish_reasons"]
                    ) == (usage.output_tokens, ("stop",))
            assert span.status.status_code is not StatusCode.ERROR


async def test_a_stream_records_time_to_first_chunk_duration_and_both_token_counts(fake: FakeProvider) -> None:
    with recording() as rec:
        async with manager(fake, rec.telemetry) as m:
            _ = [c async for c in m.stream_chat("stream me")]
        recorded = {(p.metric, p.attributes.get("gen_ai.token.type")): p.count for p in points(rec)}
    assert recorded == {(gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK, None): 1,
                        (gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION, None): 1,
                        (gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE, "input"): 1,
                        (gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE, "output"): 1}


async def test_an_error_after_the_first_chunk_sets_error_type_on_both_spans(fake: FakeProvider) -> None:
    fake.script(Fault(stream_error_after=2, code="server_error"), model="gpt-test")
    with recording() as rec:
        async with manager(fake, rec.telemetry) as m:
            with pytest.raises(StreamInterruptedError):
                _ = [c async for c in m.stream_chat("one two three four")]
        spans = both(rec)
    assert [attributes(s)["error.type"] for s in spans] == ["ProviderUnavailableError"] * 2
    assert [s.status.status_code for s in spans] == [StatusCode.ERROR] * 2


async def test_an_abandoned_stream_ends_both_spans_marked_and_without_estimated_tokens(fake: FakeProvider) -> None:
    with recording() as rec:
        async with manager(fake, rec.telemetry) as m:
            stream = m.stream_chat("one two three four")
            async for _ in stream:
                break
            await stream.aclose()
        spans = both(rec)
        token_points = [p for p in points(rec) if p.metric == gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE]
    assert [(attributes(s)["provmw.stream_abandoned"], attributes(s)["provmw.usage_estimated"]) for s in spans] == [
        (True, True)] * 2
    assert not [s for s in spans if "gen_ai.usage.output_tokens" in attributes(s)] and token_points == []


async def test_a_stream_failed_over_before_its_first_chunk_has_sibling_attempts_and_one_first_chunk_time(
        fake: FakeProvider) -> None:
    fake.script(Fault(status=503), model="gpt-test")
    with recording() as rec:
        async with manager(fake, rec.telemetry) as m:
            _ = [c async for c in m.stream_chat("stream me", controls={"max_attempts": 1})]
        _, attempts = tree(rec.finished())
        first_chunk = [p for p in points(rec) if p.metric == gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK]
    assert [attributes(s)["provmw.configuration"] for s in attempts] == ["oa", "an"]
    assert [(p.count, p.attributes["gen_ai.provider.name"]) for p in first_chunk] == [(1, "anthropic")]


async def test_a_captured_stream_records_its_assembled_answer_on_the_call_span(fake: FakeProvider) -> None:
    from provmw_otel.options import OtelOptions

    with recording() as rec:
        async with manager(fake, rec.telemetry, OtelOptions(capture_content=True)) as m:
            _ = [c async for c in m.stream_chat("mail ada@example.com")]
        call, _ = both(rec)
    messages = str(attributes(call)["gen_ai.output.messages"])
    assert "[email]" in messages and "ada@example.com" not in messages
