"""``provmw demo``: the main job on embedded defaults, against the loopback fake provider.

No API key and no network: a ``FakeProvider`` on 127.0.0.1 answers. The story runs
whatever middleware is installed, shows the stack first, and says plainly when a step
needs a middleware that is not there.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TextIO
from zoneinfo import ZoneInfo

import attrs

from provmw.cli.demo_gateway import tell_gateway
from provmw.cli.demo_operations import operation_settings, tell_operations
from provmw.cli.demo_pools import pool_settings, tell_pool
from provmw.cli.demo_trace import DemoTracing, demo_tracing, unavailable, without_plugin_layers
from provmw.cli.demo_wires import PluginWire, installed
from provmw.cli.pools import pool_rows
from provmw.cli.reports import render, usage_rows, usd
from provmw.config import ProviderConfig
from provmw.errors import ProvmwError
from provmw.manager import ServiceManager
from provmw.messages import ToolSpec
from provmw.plugins import PluginHost, PluginPolicy
from provmw.responses import ProviderResponse
from provmw.settings import Settings
from provmw.stores.usage import SqliteUsageStore
from provmw.testing import FakeProvider, Fault

__all__ = ["demo_settings", "run_demo"]

_PLUGIN_PRICE = {"input_usd_per_mtok": 0.30, "output_usd_per_mtok": 2.50, "max_output_tokens": 8192}


def demo_settings(fake: FakeProvider, state: Path, plugins: tuple[PluginWire, ...] = ()) -> Settings:
    """A primary OpenAI-style model falling back to an Anthropic-style one, both fake and priced,
    a pool of three deployments falling back to the same, and one configuration on each provider
    plugin's wire; the ledger and budgets live in ``state``."""
    ledger = str(state / "provmw.sqlite3")
    deployments, pool = pool_settings(fake, "backup")
    return Settings(
        pools={pool.name: pool},
        configurations={
            **{w.provider: w.configuration(fake, _PLUGIN_PRICE) for w in plugins},
            **deployments,
            **operation_settings(fake),
            "primary": ProviderConfig(identifier="primary", provider="openai", model="fast-model",
                                      base_url=fake.openai_base_url, api_key="sk-demo-not-a-real-key",
                                      fallbacks=("backup",), options={"temperature": 0},
                                      price={"input_usd_per_mtok": 0.15, "output_usd_per_mtok": 0.60,
                                             "max_output_tokens": 4096}),
            "backup": ProviderConfig(identifier="backup", provider="anthropic", model="steady-model",
                                     base_url=fake.anthropic_base_url, api_key="sk-demo-not-a-real-key",
                                     price={"input_usd_per_mtok": 0.80, "output_usd_per_mtok": 4.00,
                                            "max_output_tokens": 4096}),
        },
        default="primary",
        # The story injects five failures into a dozen calls; a larger window keeps the
        # breaker closed so that each step shows its own middleware at work.
        middleware={"cache": {"operations": ["embedding", "chat"]},
                    "circuit_breaker": {"window_size": 50, "min_calls": 20},
                    "budget": {"path": ledger, "timezone": "America/Los_Angeles",
                               "limits": [{"scope": "user", "match": "mallory", "period": "day",
                                           "max_cost_usd": 0.02}]},
                    "usage": {"path": ledger}},
        source="<demo settings>",
    )


@attrs.define
class _Story:
    manager: ServiceManager
    fake: FakeProvider
    out: TextIO
    plugins: tuple[PluginWire, ...] = ()
    # The failover call's span tree, or why it cannot be shown.
    tracing: DemoTracing | None = None
    untraced: str | None = None
    # What the story did that makes the ledger differ from the requests the fake saw.
    cache_hits: int = 0

    def say(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def step(self, title: str) -> None:
        self.say(f"\n== {title}")

    def show_trace(self) -> None:
        if self.tracing is None:
            self.say(f"   (no span tree: {self.untraced})")
            return
        self.say("   the same call as OpenTelemetry spans (provmw-otel: the call, then one span per attempt):")
        for line in self.tracing.tree():
            self.say(f"      {line}")

    def needs(self, name: str) -> bool:
        if name in self.manager.pipeline.order:
            return True
        self.say(f"   (skipped: no `{name}` middleware is installed yet)")
        return False

    async def call(self, make: Callable[[], Awaitable[ProviderResponse]]) -> None:
        try:
            response = await make()
        except ProvmwError as exc:
            hint = getattr(exc, "retry_after_s", None)
            after = f" (server says retry after {hint:g}s)" if hint is not None else ""
            self.say(f"   -> {type(exc).__name__}: {exc}{after}")
            return
        self.cache_hits += response.cached
        text = getattr(response, "text", None)
        shown = repr(text) if text else f"{len(getattr(response, 'vectors', ()))} vector(s)"
        calls = getattr(response, "tool_calls", ())
        if calls:
            shown = ", ".join(f"{c.name}({c.arguments})" for c in calls)
        self.say(f"   -> {shown}  [served_by={response.served_by} cached={response.cached} "
                 f"tokens={response.usage.total_tokens}]")
        if len(response.attempts) > 1:
            tried = ", ".join(f"{a.config_id}:{a.status or a.error_type or 'ok'}" for a in response.attempts)
            self.say(f"      attempts: {tried}")


async def run_demo(out: TextIO, host: PluginHost | None = None) -> int:
    """Run the scripted story, writing it to ``out``; returns the exit status (1 when the
    ledger does not hold what the story's calls should have left in it)."""
    # A temporary folder: the demo leaves no file behind, and says so where it reads the ledger.
    host = (host or PluginHost(PluginPolicy())).load()
    plugins = installed(host.collect_providers())
    with tempfile.TemporaryDirectory(prefix="provmw-demo-") as state:
        async with FakeProvider(wires=[w.make() for w in plugins]) as fake:
            untraced = unavailable(host)
            tracing = demo_tracing() if untraced is None else None
            settings = demo_settings(fake, Path(state), plugins)
            if tracing is not None:
                settings = without_plugin_layers(settings, host)
            manager = ServiceManager(settings, host=host, middleware=tracing.middleware if tracing else ())
            async with manager:
                story = _Story(manager, fake, out, plugins, tracing, untraced)
                await _tell(story)
        # Closing the manager wrote every record; read them back from the ledger file.
        return 0 if await _usage_table(story, Path(state) / "provmw.sqlite3") else 1


async def _tell(story: _Story) -> None:
    m = story.manager
    story.say(f"provmw demo: fake provider on {story.fake.url} (loopback, no key, no network)")
    story.step("The stack, outermost first")
    for entry in m.stack or ():
        story.say(f"   {entry.priority:>5}  {entry.name:<16} from {entry.plugin}")
    if not m.stack:
        story.say("   (empty: calls go straight to the provider)")

    story.step("1. A chat call through the stack")
    await story.call(lambda: m.chat("Say hello to provmw", user="ada", tenant="acme"))
    story.step("2. Embeddings, a tool call, and an image")
    story.say("   embeddings on the default configuration; the tool call and the image name")
    story.say("   configuration='backup' to show the Anthropic-style adapter (not a failover: step 4 is one):")
    await story.call(lambda: m.embed(["first text", "second text"], tenant="acme"))
    await story.call(lambda: m.chat_with_tools("Weather in Paris?", [ToolSpec(name="weather")],
                                               configuration="backup"))
    await story.call(lambda: m.vision("What is in this picture?", ["https://example.invalid/cat.png"],
                                      configuration="backup"))
    story.step("3. A stream that fails over before its first token")
    story.say("   the primary answers HTTP 200, then an in-band 'overloaded' error event, three times: opening")
    story.say("   a stream goes through the stack like any call, so retry and fallback act before a chunk is out:")
    story.fake.script(*[Fault(stream_error_after=0, code="overloaded_error", message="primary overloaded")] * 3,
                      model="fast-model")
    seen = {model: story.fake.count(model=model) for model in ("fast-model", "steady-model")}
    chunks = [c async for c in m.stream_chat("stream this answer", user="ada", tenant="acme")]
    sent = {model: story.fake.count(model=model) - count for model, count in seen.items()}
    usage = chunks[-1].usage
    story.say(f"   -> requests: {sent['fast-model']} to the primary, {sent['steady-model']} to the backup; "
              f"{len(chunks)} chunks from the backup: {''.join(c.text for c in chunks).strip()!r}")
    if usage is not None and usage.cost_usd is not None:
        story.say(f"      the last chunk carries the usage: {usage.input_tokens} in, {usage.output_tokens} out, "
                  f"{usd(usage.cost_usd)}; the ledger and budgets have it too")

    story.step("4. Failover: the primary is down (503, three times in a row)")
    story.fake.script(*[Fault(status=503, message="primary overloaded")] * 3, model="fast-model")
    if story.needs("fallback"):
        story.say("   retry tries the primary again, then the fallback walks primary -> backup:")
    if story.tracing is not None:
        story.tracing.clear()
    await story.call(lambda: m.chat("Are you there?"))
    story.show_trace()

    story.step("5. Retry-After: a short hint is honoured, a long one swaps providers")
    if story.needs("retry"):
        story.fake.script(Fault(status=429, headers={"retry-after-ms": "50"}), model="fast-model")
        story.say("   429 with retry-after-ms: 50 -> wait 50 ms, same provider:")
        await story.call(lambda: m.chat("Try me twice"))
        story.fake.script(Fault(status=429, headers={"retry-after": "120"}), model="fast-model")
        story.say("   429 with retry-after: 120 (over the 8 s cap) -> no waiting, straight to the backup:")
        await story.call(lambda: m.chat("No time to wait"))
    story.step("6. The same deterministic question twice, then from another tenant")
    if story.needs("cache"):
        for tenant in ("acme", "acme", "globex"):
            story.say(f"   tenant={tenant}:")
            await story.call(functools.partial(m.chat, "What is 2 + 2?", tenant=tenant))
    story.step("7. Budgets: mallory may spend $0.02 a day; strict mode reserves the worst case first")
    if story.needs("budget"):
        story.say("   a short answer: its worst case (4096 tokens out on the dearer backup) fits; it costs far less:")
        await story.call(lambda: m.chat("A small question", user="mallory"))
        story.say("   max_tokens=8000 could cost $0.032 on the backup: refused before any request goes out:")
        before = story.fake.count()
        await story.call(lambda: m.chat("Spend it all", user="mallory", options={"max_tokens": 8000}))
        story.say(f"      requests sent for it: {story.fake.count() - before}")
    story.step("8. The same stack in front of the provider plugins' wire formats")
    if not story.plugins:
        story.say("   (none installed: `./dev` installs provmw-gemini, provmw-azure and provmw-bedrock)")
    for wire in story.plugins:
        story.say(f"   configuration={wire.provider!r} (provider {wire.provider!r}, from its plugin):")
        await story.call(functools.partial(m.chat, f"Hello from {wire.provider}", configuration=wire.provider,
                                           user="ada", tenant="acme"))
    story.step("9. A pool: three deployments of one model behind one name, each session kept on its own")
    if story.needs("pool"):
        await tell_pool(story)
    story.step("10. Beyond chat: the Responses API, an image, speech and its transcript, a rerank, a moderation")
    await tell_operations(story)
    story.step("11. The gateway (`provmw serve`): a virtual key, the OpenAI SDK as its client, the key's budget")
    await tell_gateway(story)


def _table(story: _Story, table: str) -> None:
    for line in table.splitlines():
        story.say(f"   {line}")


async def _usage_table(story: _Story, ledger: Path) -> bool:
    """Print the ledger by configuration; whether it holds one record per request the fake saw
    (streams included), plus the cache hits (recorded, never sent)."""
    story.step("Usage by configuration, read back from the ledger")
    story.say(f"   ({ledger.name} in a temporary folder, deleted when the demo ends; an application's")
    story.say("   ledger stays next to its provmw.toml, and `provmw usage` reads it)")
    store = SqliteUsageStore(ledger)
    records = await store.records()
    await store.aclose()
    _table(story, render(usage_rows(records, "configuration", ZoneInfo("UTC")), "table"))
    if story.manager.settings.pools:
        story.say("\n   by pool (`provmw usage --group-by pool`: each deployment under its pool; (none): no pool's)")
        _table(story, render(pool_rows(records, story.manager.settings, ZoneInfo("UTC")), "table"))
    requests = story.fake.count()
    expected = requests + story.cache_hits
    story.say(f"\n   {len(records)} ledger records: one per request that went through the stack (streams too) "
              f"and one per\n   cache hit = {requests} requests the fake provider saw "
              f"+ {story.cache_hits} cache hit (recorded, never sent) = {expected}"
              f"{'' if expected == len(records) else '  MISMATCH: the ledger lost or doubled a record'}")
    return expected == len(records)
