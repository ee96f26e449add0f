"""Two layers, one tracer: a CLIENT span for the logical call (outermost) and a child span
for each request that reaches a provider (innermost), so retries and fallbacks are siblings."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import attrs
from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.pipeline import Next, R
from provmw.responses import ProviderResponse
from provmw_otel import attributes as attr
from provmw_otel.options import OtelOptions

__all__ = ["OtelAttemptMiddleware", "OtelCallMiddleware", "Telemetry"]

SCOPE = "provmw_otel"
# The conventions' advisory bucket boundaries for the two GenAI client histograms.
_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
_TOKEN_BUCKETS = tuple(float(4**n) for n in range(14))
_TRACEPARENT = TraceContextTextMapPropagator()


class Telemetry:
    """The tracer and the two histograms both layers share; the global providers unless given."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: metrics.MeterProvider | None = None) -> None:
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        self.attributes = attr.StartAttributes()
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS)
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Measures number of input and output tokens used",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS)

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Any]) -> Iterator[Span]:
        """A current CLIENT span that records no exception text (it may quote a provider's body)."""
        with self.tracer.start_as_current_span(name, kind=SpanKind.CLIENT, attributes=attributes,
                                               record_exception=False, set_status_on_exception=False) as span:
            yield span


def _failed(span: Span, error: BaseException) -> attr.Attributes:
    found = attr.error_attributes(error)
    span.set_attributes(found)
    span.set_status(Status(StatusCode.ERROR, found[attr.ERROR_TYPE]))
    return found


class OtelCallMiddleware:
    """One CLIENT span per logical call: what was asked, of which configuration, and how it ended."""

    name = "otel"
    # Above every built-in (deadline 850) and the call log (900): the span covers the whole call,
    # cache hits and refusals included, and the call log's line is written inside it.
    priority = 950

    def __init__(self, options: OtelOptions, telemetry: Telemetry) -> None:
        self.options = options
        self._telemetry = telemetry

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        with self._telemetry.span(attr.span_name(ctx, config), self._telemetry.attributes(ctx, config)) as span:
            if span.is_recording():  # redacting costs more than the rest: not for a span nobody keeps
                span.set_attributes(attr.caller_attributes(ctx))
            try:
                response = await next(config)
            except BaseException as exc:
                _failed(span, exc)
                raise
            if span.is_recording():
                self._answered(span, response)
            return response

    def _answered(self, span: Span, response: ProviderResponse) -> None:
        span.set_attributes(attr.response_attributes(response))
        if response.cached:
            span.add_event("provmw.cache_hit", {"provmw.served_by": response.served_by})
        if self.options.capture_content and (messages := attr.output_messages(response)) is not None:
            span.set_attribute(attr.OUTPUT_MESSAGES, messages)


class OtelAttemptMiddleware:
    """One CLIENT span per request that reaches a provider, with the conventions' metrics."""

    name = "otel_attempts"
    # Innermost (below timeout 200): it wraps exactly the request the terminal makes, so its
    # times are the request's, and a traceparent it sends names this span.
    priority = 100

    def __init__(self, options: OtelOptions, telemetry: Telemetry,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.options = options
        self._telemetry = telemetry
        self._clock = clock

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        started = self._clock()
        span_attributes = self._telemetry.attributes(ctx, config)
        with self._telemetry.span(attr.span_name(ctx, config), span_attributes) as span:
            try:
                response = await next(self._carrying_traceparent(config))
            except BaseException as exc:
                self._measure(started, span_attributes | _failed(span, exc))
                raise
            answer = attr.response_attributes(response)
            span.set_attributes(answer)
            self._measure(started, span_attributes | answer, response)
            return response

    def _carrying_traceparent(self, config: ProviderConfig) -> ProviderConfig:
        if not self.options.sends_traceparent(config.identifier):
            return config
        headers: dict[str, str] = {}
        _TRACEPARENT.inject(headers)
        return attrs.evolve(config, headers={**config.headers, **headers}) if headers else config

    def _measure(self, started: float, found: Mapping[str, Any], response: ProviderResponse | None = None) -> None:
        labels = attr.metric_attributes(found)
        self._telemetry.duration.record(self._clock() - started, labels)
        if response is None:
            return
        self._telemetry.tokens.record(response.usage.input_tokens, labels | {attr.TOKEN_TYPE: "input"})
        if attr.OUTPUT_TOKENS in found:
            self._telemetry.tokens.record(response.usage.output_tokens, labels | {attr.TOKEN_TYPE: "output"})
