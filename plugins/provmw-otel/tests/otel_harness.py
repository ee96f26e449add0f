"""What the plugin's tests share: an SDK that keeps what the plugin emits in memory, a manager
whose stack is the built-ins plus the plugin's two layers, and the calls the issue names."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import attrs
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from provmw_otel import middleware
from provmw_otel.middleware import Telemetry
from provmw_otel.options import OtelOptions

from provmw import ServiceManager
from provmw.config import ProviderConfig
from provmw.destinations import DestinationPolicy
from provmw.errors import ProvmwError
from provmw.middleware.retry import RetryMiddleware, RetryOptions
from provmw.plugins import PluginHost, PluginPolicy
from provmw.responses import ChatChunk, ProviderResponse
from provmw.settings import Settings
from provmw.testing import FakeClock, FakeProvider, Fault

KEY = "sk-OTEL-SENTINEL-5e1d-never-exported"
USER, TENANT = "ada@example.com", "+44 20 7946 0958"


@attrs.define
class Recorded:
    """What the plugin emitted through an in-memory SDK (or, given ``processor``, exported)."""

    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    telemetry: Telemetry

    def finished(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.spans.get_finished_spans())


@attrs.frozen
class Point:
    """One histogram data point as the in-memory reader holds it."""

    metric: str
    count: int
    attributes: Mapping[str, Any]


def points(rec: Recorded) -> list[Point]:
    data = rec.metrics.get_metrics_data()
    return [Point(m.name, p.count, dict(p.attributes or {}))
            for r in (data.resource_metrics if data else []) for sm in r.scope_metrics for m in sm.metrics
            for p in m.data.data_points if isinstance(p, HistogramDataPoint)]


def tree(spans: tuple[ReadableSpan, ...]) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The call span and its children, oldest first."""
    [root] = [s for s in spans if s.parent is None]
    children = [s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id]
    return root, sorted(children, key=lambda s: s.start_time or 0)


@contextmanager
def recording() -> Iterator[Recorded]:
    spans, metrics = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    meter_provider = MeterProvider(metric_readers=[metrics])
    yield Recorded(spans, metrics, tracer_provider, meter_provider, Telemetry(tracer_provider, meter_provider))
    tracer_provider.shutdown()
    meter_provider.shutdown()


def configurations(fake: FakeProvider, backup: FakeProvider | None = None) -> dict[str, ProviderConfig]:
    """"oa" (OpenAI wire) falling back to "an" (Anthropic wire), on ``backup`` when given."""
    return {
        "oa": ProviderConfig(identifier="oa", provider="openai", model="gpt-test", base_url=fake.openai_base_url,
                             api_key=KEY, fallbacks=("an",), options={"temperature": 0, "max_tokens": 50}),
        "an": ProviderConfig(identifier="an", provider="anthropic", model="claude-test",
                             base_url=(backup or fake).anthropic_base_url, api_key=KEY, options={"max_tokens": 50}),
    }


def manager(fake: FakeProvider, telemetry: Telemetry, options: OtelOptions | None = None, *,
            configs: Mapping[str, ProviderConfig] | None = None, **sections: Mapping[str, Any]) -> ServiceManager:
    """The built-ins (state in memory, retries waiting on a fake clock) and the plugin's layers,
    over ``configs`` ("oa" and "an" on ``fake`` unless given)."""
    defaults: dict[str, Mapping[str, Any]] = {"usage": {"store": "memory"}, "budget": {"store": "memory"},
                                              "retry": {"enabled": False}}
    settings = Settings(configurations=dict(configs or configurations(fake)), default="oa",
                        middleware={**defaults, **sections},
                        destinations=DestinationPolicy(ad_hoc_destinations=("public", "loopback")))
    retry = RetryMiddleware(RetryOptions(), sleep=FakeClock().sleep)
    return ServiceManager(settings, host=PluginHost(PluginPolicy(autoload=False), environ={}),
                          middleware=[retry, *middleware(options or OtelOptions(), telemetry)])


Answer = ProviderResponse | list[ChatChunk]
Call = Callable[[ServiceManager, FakeProvider], Awaitable[Answer]]


async def _plain(m: ServiceManager, fake: FakeProvider) -> ProviderResponse:
    return await m.chat("hi there", user=USER, tenant=TENANT)


async def _retried(m: ServiceManager, fake: FakeProvider) -> ProviderResponse:
    fake.script(Fault(status=503), model="gpt-test")
    return await m.chat("hi there")


async def _failover(m: ServiceManager, fake: FakeProvider) -> ProviderResponse:
    fake.script(Fault(status=503), model="gpt-test")
    return await m.chat("hi there", controls={"max_attempts": 1})


async def _cache_hit(m: ServiceManager, fake: FakeProvider) -> ProviderResponse:
    await m.chat("hi there")
    return await m.chat("hi there")


async def _streamed(m: ServiceManager, fake: FakeProvider) -> list[ChatChunk]:
    return [chunk async for chunk in m.stream_chat("hi there", user=USER, tenant=TENANT)]


async def _budget_refusal(m: ServiceManager, fake: FakeProvider) -> ProviderResponse:
    return await m.chat("hi there")


# The calls the issue names, each with the settings sections it needs.
SCENARIOS: dict[str, tuple[Call, dict[str, Mapping[str, Any]]]] = {
    "plain": (_plain, {}),
    "retried": (_retried, {}),
    "failover": (_failover, {}),
    "cache_hit": (_cache_hit, {"cache": {"operations": ["chat"]}}),
    "streamed": (_streamed, {}),
    "budget_refusal": (_budget_refusal, {"budget": {"store": "memory", "limits": [
        {"scope": "global", "period": "total", "max_requests": 0}]}}),
}


async def run(name: str, fake: FakeProvider, telemetry: Telemetry,
              options: OtelOptions | None = None) -> Answer | ProvmwError:
    """Run scenario ``name`` on a fresh manager; its answer, or the provmw error it raised."""
    call, sections = SCENARIOS[name]
    async with manager(fake, telemetry, options, **sections) as m:
        try:
            return await call(m, fake)
        except ProvmwError as exc:
            return exc


@pytest.fixture(name="fake")
async def fake_provider() -> AsyncIterator[FakeProvider]:
    """The loopback fake provider (test modules import this fixture; no conftest, whose module
    name the other plugins' test folders already use)."""
    async with FakeProvider() as server:
        yield server
