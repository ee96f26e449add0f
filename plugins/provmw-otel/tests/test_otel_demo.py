"""``provmw demo`` with the plugin and the SDK importable: the failover call's span tree, on a
tracer provider of the demo's own (the global one is left alone)."""

from __future__ import annotations

import io

from opentelemetry import trace

from provmw.cli.demo import run_demo
from provmw.plugins import PluginHost, PluginPolicy


async def test_the_demo_prints_the_failover_calls_span_tree_with_an_error_per_failed_attempt() -> None:
    out = io.StringIO()
    assert await run_demo(out, PluginHost(PluginPolicy(autoload=False), environ={})) == 0
    step_four = out.getvalue().split("== 4.", 1)[1].split("== 5.", 1)[0]
    tree = [line.strip() for line in step_four.splitlines() if "CLIENT" in line]
    assert tree[0].startswith("chat fast-model") and "provmw.served_by=backup" in tree[0]
    assert [line.split()[0] for line in tree[1:]] == ["├──", "├──", "├──", "└──"]
    assert sum("error.type=ProviderUnavailableError" in line for line in tree) == 3
    assert "chat steady-model" in tree[-1]


async def test_the_demo_sets_no_global_tracer_provider() -> None:
    await run_demo(io.StringIO(), PluginHost(PluginPolicy(autoload=False), environ={}))
    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"
