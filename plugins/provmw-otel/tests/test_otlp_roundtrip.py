"""A real OTLP/HTTP round trip: the official exporters post protobuf to a receiver on loopback,
which decodes it with opentelemetry-proto; what arrives is what an operator's collector sees."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
from aiohttp import web
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from otel_harness import KEY, fake_provider, run  # noqa: F401  (a fixture)
from provmw_otel.middleware import Telemetry

from provmw.testing import FakeProvider


@attrs.define
class Receiver:
    """An OTLP/HTTP receiver: every span and metric point posted to it, decoded."""

    url: str = ""
    spans: list[dict[str, Any]] = attrs.field(factory=list)
    points: list[dict[str, Any]] = attrs.field(factory=list)
    bodies: list[bytes] = attrs.field(factory=list)

    async def traces(self, request: web.Request) -> web.Response:
        decoded = _decoded(ExportTraceServiceRequest(), self.bodies, await request.read())
        for scope in (s for r in decoded.resource_spans for s in r.scope_spans):
            self.spans += [{"name": s.name, "kind": s.kind, "id": s.span_id, "parent": s.parent_span_id,
                            "status": s.status.code, "events": [e.name for e in s.events],
                            **_values(s.attributes)} for s in scope.spans]
        return web.Response(content_type="application/x-protobuf", body=b"")

    async def metrics(self, request: web.Request) -> web.Response:
        decoded = _decoded(ExportMetricsServiceRequest(), self.bodies, await request.read())
        for metric in (m for r in decoded.resource_metrics for s in r.scope_metrics for m in s.metrics):
            self.points += [{"metric": metric.name, "count": p.count, "sum": p.sum, **_values(p.attributes)}
                            for p in metric.histogram.data_points]
        return web.Response(content_type="application/x-protobuf", body=b"")


def _decoded(message: Any, bodies: list[bytes], body: bytes) -> Any:
    bodies.append(body)
    message.ParseFromString(body)
    return message


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def _values(attributes: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in attributes}


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", found.traces)
    app.router.add_post("/v1/metrics", found.metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    found.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield found
    await runner.cleanup()


async def exported(scenario: str, fake: FakeProvider, receiver: Receiver) -> Receiver:
    """Run ``scenario`` with the OTLP/HTTP exporters, then flush them (in a thread: they block)."""
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces")))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{receiver.url}/v1/metrics"),
                                           export_interval_millis=3_600_000)
    meter_provider = MeterProvider(metric_readers=[reader])
    await run(scenario, fake, Telemetry(tracer_provider, meter_provider))
    await asyncio.to_thread(tracer_provider.shutdown)
    await asyncio.to_thread(meter_provider.shutdown)
    return receiver


def children(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    [root] = [s for s in spans if not s["parent"]]
    return [s for s in spans if s["parent"] == root["id"]]


async def test_a_plain_call_arrives_as_a_call_span_an_attempt_span_and_both_histograms(
        fake: FakeProvider, receiver: Receiver) -> None:
    got = await exported("plain", fake, receiver)
    [attempt] = children(got.spans)
    assert (attempt["name"], attempt["gen_ai.usage.input_tokens"], attempt["server.address"]) == (
        "chat gpt-test", 2, "127.0.0.1")
    assert {(p["metric"], p.get("gen_ai.token.type")) for p in got.points} == {
        ("gen_ai.client.operation.duration", None), ("gen_ai.client.token.usage", "input"),
        ("gen_ai.client.token.usage", "output")}


async def test_a_retried_call_arrives_with_two_sibling_attempts(fake: FakeProvider, receiver: Receiver) -> None:
    got = await exported("retried", fake, receiver)
    assert [s.get("error.type") for s in children(got.spans)] == ["ProviderUnavailableError", None]
    durations = [p for p in got.points if p["metric"] == "gen_ai.client.operation.duration"]
    assert sorted(p["count"] for p in durations) == [1, 1]


async def test_a_failover_arrives_with_an_attempt_per_configuration(fake: FakeProvider, receiver: Receiver) -> None:
    got = await exported("failover", fake, receiver)
    assert [(s["provmw.configuration"], s["gen_ai.provider.name"]) for s in children(got.spans)] == [
        ("oa", "openai"), ("an", "anthropic")]


async def test_a_cache_hit_arrives_as_an_event_and_no_attempt(fake: FakeProvider, receiver: Receiver) -> None:
    got = await exported("cache_hit", fake, receiver)
    [hit] = [s for s in got.spans if s["events"]]
    assert hit["events"] == ["provmw.cache_hit"] and hit["provmw.cached"] is True
    assert not [s for s in got.spans if s["parent"] == hit["id"]]


async def test_a_budget_refusal_arrives_as_one_failed_span_and_no_metric(
        fake: FakeProvider, receiver: Receiver) -> None:
    got = await exported("budget_refusal", fake, receiver)
    [span] = got.spans
    assert (span["error.type"], span["status"]) == ("BudgetExceededError", 2)  # STATUS_CODE_ERROR
    assert got.points == []


async def test_nothing_exported_holds_the_key_or_the_callers_text(fake: FakeProvider, receiver: Receiver) -> None:
    for scenario in ("plain", "failover"):
        await exported(scenario, fake, receiver)
    wire = b"".join(receiver.bodies)
    assert KEY.encode() not in wire and b"hi there" not in wire and b"ada@example.com" not in wire
