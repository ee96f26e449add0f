"""Two layers, one tracer: a CLIENT span for the logical call (outermost) and a child span
for each request that reaches a provider (innermost), so retries and fallbacks are siblings.
The call span names the server of the attempt that served (``provmw_otel.servers``).

A streamed call's spans end when its stream ends, not when the pipeline returns the opened
stream: both layers end them from an end-of-stream callback (ADR 0005), which runs exactly
once whether the stream completed, failed after its first chunk, or was abandoned.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from opentelemetry import context, metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.pipeline import Next, R
from provmw.pools import Pool
from provmw.responses import EmbeddingResponse, ProviderResponse
from provmw.streams import OpenedStream, StreamEnd
from provmw_otel import attributes as attr
from provmw_otel.options import OtelOptions
from provmw_otel.servers import Servers, carrying, noted
from provmw_otel.shapes import Labels, Shape, Shapes

__all__ = ["OtelAttemptMiddleware", "OtelCallMiddleware", "Telemetry"]

SCOPE = "provmw_otel"
# The conventions' advisory bucket boundaries for the GenAI histograms (time to first chunk:
# those they give for time to first token).
_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
_FIRST_CHUNK_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
_TOKEN_BUCKETS = tuple(float(4**n) for n in range(14))
_TRACEPARENT = TraceContextTextMapPropagator()


class Telemetry:
    """The tracer and the histograms both layers share; the global providers unless given."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: metrics.MeterProvider | None = None) -> None:
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        self.shapes = Shapes()
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS)
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Measures number of input and output tokens used",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS)
        self.first_chunk = meter.create_histogram(
            "gen_ai.client.operation.time_to_first_chunk", unit="s",
            description="Time to receive the first chunk in a streaming operation",
            explicit_bucket_boundaries_advisory=_FIRST_CHUNK_BUCKETS)

    def start(self, name: str, attributes: Mapping[str, Any]) -> Span:
        """A CLIENT span, not yet current; whoever starts it ends it (a stream's outlives ``handle``)."""
        return self.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)


def _settle(span: Span, found: attr.Attributes, error: BaseException | None) -> str | None:
    """Put ``found`` and what ``error`` says on ``span`` in one call (the SDK validates per call,
    so one call costs less than two); the error's type, or None when there was none."""
    if error is None:
        span.set_attributes(found)
        return None
    # The exception itself is not recorded: its message may quote a provider's body.
    failure = attr.error_attributes(error)
    found.update(failure)
    span.set_attributes(found)
    span.set_status(Status(StatusCode.ERROR, failure[attr.ERROR_TYPE]))
    return str(failure[attr.ERROR_TYPE])


class OtelCallMiddleware:
    """One CLIENT span per logical call: what was asked, of which configuration, and how it ended."""

    name = "otel"
    # Above every built-in (deadline 850) and the call log (900): the span covers the whole call,
    # cache hits and refusals included, and the call log's line is written inside it.
    priority = 950

    def __init__(self, options: OtelOptions, telemetry: Telemetry, pools: Mapping[str, Pool] | None = None) -> None:
        self.options = options
        self._telemetry = telemetry
        self._pools: Mapping[str, Pool] = pools or {}

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        shape = self._telemetry.shapes(ctx, config)
        span = self._telemetry.start(shape.name, shape.call)
        # Where the attempts note their servers; none for a span nobody keeps.
        servers = Servers() if span.is_recording() else None
        current = trace.set_span_in_context(span)
        token = context.attach(current if servers is None else carrying(servers, current))
        try:
            response = await next(config)
        except BaseException as exc:
            _settle(span, self._failed(ctx, servers), exc)
            span.end()
            raise
        finally:
            context.detach(token)
        if isinstance(response, OpenedStream):
            async def end_span(end: StreamEnd) -> None:
                if servers is not None:
                    found = self._ended(ctx, config, attr.stream_end_attributes(end), end.response, servers)
                    _settle(span, found, end.error)
                span.end()

            response.on_end(end_span)
            return response
        if servers is not None:
            span.set_attributes(self._ended(ctx, config, attr.response_attributes(response), response, servers))
            if response.cached:
                span.add_event("provmw.cache_hit", {"provmw.served_by": response.served_by})
        span.end()
        return response

    @staticmethod
    def _failed(ctx: ProviderCallContext, servers: Servers | None) -> attr.Attributes:
        """Who asked (redacted), and the server of the last attempt; nothing for a span nobody
        keeps, whose redaction would be work for nothing."""
        return {} if servers is None else {**attr.caller_attributes(ctx), **servers.last}

    def _ended(self, ctx: ProviderCallContext, config: ProviderConfig, found: attr.Attributes,
               response: ProviderResponse, servers: Servers) -> attr.Attributes:
        """``found`` (the answer's attributes), with the server that served it (none from the
        cache), who served (and the pool it served for) and who asked and, when captured, the
        answer's text."""
        found.update(servers.serving(response.served_by))
        found.update(attr.served_attributes(response))
        if self._pools:
            found.update(attr.pool_attributes(config, response.served_by, self._pools))
        found.update(attr.caller_attributes(ctx))
        if self.options.capture_content and (messages := attr.output_messages(response)) is not None:
            found[attr.OUTPUT_MESSAGES] = messages
        return found


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
        shape = self._telemetry.shapes(ctx, config)
        span = self._telemetry.start(shape.name, shape.attempt_attributes(ctx))
        # Sampled as its call span (parent-based, the default): a span not kept notes nothing.
        servers = noted() if span.is_recording() else None
        token = context.attach(trace.set_span_in_context(span))
        try:
            response = await next(self._carrying_traceparent(config))
        except BaseException as exc:
            if servers is not None:
                servers.ended(config.identifier, shape.server, answered=False)
            self._measure(started, shape.labels(None, _settle(span, {}, exc)))
            span.end()
            raise
        finally:
            context.detach(token)
        if servers is not None:  # a stream's attempt served once it opened
            servers.ended(config.identifier, shape.server, answered=True)
        if isinstance(response, OpenedStream):
            self._opened(span, started, shape, response)
            return response
        if span.is_recording():
            span.set_attributes(attr.response_attributes(response))
        self._measure(started, shape.labels(response.model, None), response)
        span.end()
        return response

    def _opened(self, span: Span, started: float, shape: Shape, opened: OpenedStream) -> None:
        """Time to the first chunk now; the duration and the tokens when the stream ends."""
        self._telemetry.first_chunk.record(self._clock() - started, shape.labels(opened.model, None).duration)

        async def end_span(end: StreamEnd) -> None:
            failed = _settle(span, attr.stream_end_attributes(end), end.error)
            answered = None if end.usage_estimated else end.response
            self._measure(started, shape.labels(end.response.model, failed), answered)
            span.end()

        opened.on_end(end_span)

    def _carrying_traceparent(self, config: ProviderConfig) -> ProviderConfig:
        if not self.options.sends_traceparent(config.identifier):
            return config
        headers: dict[str, str] = {}
        _TRACEPARENT.inject(headers)
        return attrs.evolve(config, headers={**config.headers, **headers}) if headers else config

    def _measure(self, started: float, labels: Labels, response: ProviderResponse | None = None) -> None:
        """The attempt's duration and, when it answered, its tokens (output ones unless an embedding)."""
        self._telemetry.duration.record(self._clock() - started, labels.duration)
        if response is None:
            return
        self._telemetry.tokens.record(response.usage.input_tokens, labels.input_tokens)
        if not isinstance(response, EmbeddingResponse):
            self._telemetry.tokens.record(response.usage.output_tokens, labels.output_tokens)
