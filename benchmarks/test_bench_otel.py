"""What provmw-otel adds to a call: its two layers around a terminal that answers at once,
with the API's no-op provider and with the SDK batching spans to an exporter that drops them.
Goal: at most 30 us per call over the bare pipeline (1,000 calls per round)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from provmw_otel import middleware
from provmw_otel.middleware import Telemetry
from provmw_otel.options import OtelOptions

from benchmarks.conftest import run_batch
from provmw.config import ProviderConfig
from provmw.context import ProviderOperation
from provmw.pipeline import MiddlewarePipeline
from provmw.responses import CompletionResponse, Usage
from provmw.testing import call_context

CALLS = 1_000
CONFIG = ProviderConfig(identifier="bench", provider="openai", model="m", base_url="http://127.0.0.1:1/v1",
                        options={"temperature": 0, "max_tokens": 50})
RESPONSE = CompletionResponse(provider="openai", model="m", text="x", served_by="bench", finish_reason="stop",
                              usage=Usage(input_tokens=3, output_tokens=5))
CTX = call_context(ProviderOperation.CHAT, user="ada", tenant="acme")


class Dropping(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


async def terminal(config: ProviderConfig) -> CompletionResponse:
    return RESPONSE


def telemetry(kind: str) -> Telemetry:
    if kind == "noop":
        return Telemetry(trace.NoOpTracerProvider(), NoOpMeterProvider())
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropping(), max_queue_size=100_000))
    return Telemetry(provider, MeterProvider())


@pytest.mark.parametrize("kind", ["none", "noop", "batching"])
def test_otel_overhead(benchmark: Any, loop: Any, kind: str) -> None:
    layers = [] if kind == "none" else middleware(OtelOptions(), telemetry(kind))
    pipeline = MiddlewarePipeline(layers)
    benchmark.group = "provmw-otel"
    benchmark(run_batch(loop, lambda: pipeline.run(CTX, CONFIG, terminal), CALLS))
