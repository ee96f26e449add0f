"""``provmw demo``: the main job on embedded defaults, against the loopback fake provider.

No API key and no network: a ``FakeProvider`` on 127.0.0.1 answers. The story runs
whatever middleware is installed, shows the stack first, and says plainly when a step
needs a middleware that is not there.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Awaitable, Callable
from typing import TextIO

import attrs

from provmw.config import ProviderConfig
from provmw.errors import ProvmwError
from provmw.manager import ServiceManager
from provmw.messages import ToolSpec
from provmw.plugins import PluginHost, PluginPolicy
from provmw.responses import ProviderResponse
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault

__all__ = ["demo_settings", "run_demo"]


def demo_settings(fake: FakeProvider) -> Settings:
    """A primary OpenAI-style model falling back to an Anthropic-style one, both fake."""
    return Settings(
        configurations={
            "primary": ProviderConfig(identifier="primary", provider="openai", model="fast-model",
                                      base_url=fake.openai_base_url, api_key="sk-demo-not-a-real-key",
                                      fallbacks=("backup",), options={"temperature": 0}),
            "backup": ProviderConfig(identifier="backup", provider="anthropic", model="steady-model",
                                     base_url=fake.anthropic_base_url, api_key="sk-demo-not-a-real-key"),
        },
        default="primary",
        # The story injects five failures into a dozen calls; a larger window keeps the
        # breaker closed so that each step shows its own middleware at work.
        middleware={"cache": {"operations": ["embedding", "chat"]},
                    "circuit_breaker": {"window_size": 50, "min_calls": 20}},
        source="<demo settings>",
    )


@attrs.define
class _Story:
    manager: ServiceManager
    fake: FakeProvider
    out: TextIO
    served: list[ProviderResponse] = attrs.Factory(list)

    def say(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def step(self, title: str) -> None:
        self.say(f"\n== {title}")

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
        self.served.append(response)
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
    """Run the scripted story, writing it to ``out``; returns the exit status."""
    async with FakeProvider() as fake:
        settings = demo_settings(fake)
        manager = ServiceManager(settings, host=host or PluginHost(PluginPolicy()))
        async with manager:
            story = _Story(manager, fake, out)
            await _tell(story)
    return 0


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
    await story.call(lambda: m.embed(["first text", "second text"], tenant="acme"))
    await story.call(lambda: m.chat_with_tools("Weather in Paris?", [ToolSpec(name="weather")],
                                               configuration="backup"))
    await story.call(lambda: m.vision("What is in this picture?", ["https://example.invalid/cat.png"],
                                      configuration="backup"))
    story.step("3. Streaming (outside the pipeline by design)")
    chunks = [c.text async for c in m.stream_chat("stream this answer", configuration="backup")]
    story.say(f"   -> {len(chunks)} chunks: {''.join(chunks).strip()!r}")

    story.step("4. Failover: the primary is down (503, three times in a row)")
    story.fake.script(*[Fault(status=503, message="primary overloaded")] * 3, model="fast-model")
    if story.needs("fallback"):
        story.say("   retry tries the primary again, then the fallback walks primary -> backup:")
    await story.call(lambda: m.chat("Are you there?"))

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
    story.step("7. A call over budget")
    if story.needs("budget"):
        await story.call(lambda: m.chat("Spend it all", user="mallory"))

    story.step("Usage by configuration (from the responses)")
    _usage_table(story)


def _usage_table(story: _Story) -> None:
    rows: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for response in story.served:
        row = rows[response.served_by]
        row["calls"] += 1
        row["tokens"] += response.usage.total_tokens
        row["cache hits"] += int(response.cached)
    story.say(f"   {'configuration':<14}{'calls':>7}{'tokens':>8}{'cache hits':>12}")
    for name, row in sorted(rows.items()):
        story.say(f"   {name:<14}{row['calls']:>7}{row['tokens']:>8}{row['cache hits']:>12}")
    story.say(f"\n   the fake provider saw {story.fake.count()} requests in all")
