"""The demo's span tree: provmw-otel's two layers on an in-memory OpenTelemetry SDK that only
the demo's manager uses (never the application's global providers), rendered as text.

Imported lazily by ``provmw.cli.demo``: the plugin and the SDK are optional, and ``import provmw``
never imports OpenTelemetry.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from provmw.pipeline import Middleware
from provmw.plugins import PluginHost
from provmw.settings import Settings

__all__ = ["PLUGIN", "DemoTracing", "demo_tracing", "unavailable", "without_plugin_layers"]

PLUGIN = "otel"
# What each span shows: the attempt that failed and why, and who finally answered.
_SHOWN = ("provmw.configuration", "error.type", "provmw.status_code", "provmw.served_by", "gen_ai.usage.output_tokens")
_NAME_WIDTH = 26


@attrs.define
class DemoTracing:
    """The demo's own tracing: the layers to add to its manager, and what they recorded."""

    middleware: list[Middleware]
    exporter: Any  # an InMemorySpanExporter; typed loosely so this module imports no SDK

    def clear(self) -> None:
        self.exporter.clear()

    def tree(self) -> list[str]:
        """The spans recorded since ``clear``, one line each, children under their parent."""
        spans = sorted(self.exporter.get_finished_spans(), key=lambda s: s.start_time or 0)
        ids = {s.context.span_id for s in spans}
        roots = [s for s in spans if s.parent is None or s.parent.span_id not in ids]
        return [line for root in roots for line in _lines(root, spans, "", "")]


def _lines(span: Any, spans: Sequence[Any], lead: str, indent: str) -> Iterator[str]:
    shown = "  ".join(f"{k}={span.attributes[k]}" for k in _SHOWN if k in (span.attributes or {}))
    yield f"{lead}{span.name:<{_NAME_WIDTH - len(lead)}} {span.kind.name}  {shown}"
    children = [s for s in spans if s.parent is not None and s.parent.span_id == span.context.span_id]
    for i, child in enumerate(children):
        last = i == len(children) - 1
        yield from _lines(child, spans, indent + ("└── " if last else "├── "), indent + ("    " if last else "│   "))


def unavailable(host: PluginHost) -> str | None:
    """Why the demo cannot show a span tree, with how to get one; None when it can."""
    status = host.policy.status_of(PLUGIN)
    if status == "blocked":
        return f"the plugin policy blocks the `{PLUGIN}` plugin"
    if status == "not-allowed":
        return f"the `{PLUGIN}` plugin is not in the plugin allowlist"
    missing = [name for name, module in (("provmw-otel", "provmw_otel"), ("opentelemetry-sdk", "opentelemetry.sdk"))
               if _absent(module)]
    if missing:
        return (f"install {' and '.join(missing)} (in a clone: pip install -e 'plugins/provmw-otel[test]') "
                "to see this call's span tree")
    return None


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True


def demo_tracing() -> DemoTracing:
    """The plugin's layers on a private SDK tracer provider (call ``unavailable`` first)."""
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from provmw_otel import OtelOptions, Telemetry, middleware

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return DemoTracing(middleware(OtelOptions(), Telemetry(provider, NoOpMeterProvider())), exporter)


def without_plugin_layers(settings: Settings, host: PluginHost) -> Settings:
    """``settings`` with the plugin's own layers off when the host loaded it: the demo adds its
    pair, bound to its private provider, and nothing reaches the application's."""
    if not any(p.name == PLUGIN and p.status == "loaded" for p in host.load().plugins):
        return settings
    return attrs.evolve(settings, middleware={**settings.middleware, PLUGIN: {"enabled": False}})
