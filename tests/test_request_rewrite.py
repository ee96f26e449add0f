"""A layer that rewrites the request (ADR 0001): the layers below, the facts and the adapter see the rewrite."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.errors import ConfigurationError
from provmw.manager import ServiceManager
from provmw.messages import Message
from provmw.pipeline import MiddlewarePipeline, Next, R
from provmw.plugins import PluginHost
from provmw.requests import ChatRequest, EmbeddingRequest
from provmw.responses import CompletionResponse
from provmw.settings import Settings
from provmw.testing import FakeProvider, call_context
from tests.conftest import openai_config

CONFIG = ProviderConfig(identifier="oa", provider="openai", model="m")


class Rewrite:
    """Replaces every "secret" in the messages by "[gone]"."""

    name, priority = "rewrite", 825

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        request = ctx.request
        assert isinstance(request, ChatRequest)
        messages = tuple(Message(m.role, m.text.replace("secret", "[gone]")) for m in request.messages)
        return await next(config, ctx.with_request(attrs.evolve(request, messages=messages)))


class Seen:
    """Notes the context each call reached it with."""

    def __init__(self, name: str, priority: int) -> None:
        self.name, self.priority, self.contexts = name, priority, list[ProviderCallContext]()

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        self.contexts.append(ctx)
        return await next(config)


class ReadingTerminal:
    """A terminal that reads the request from the context it is bound to."""

    def __init__(self, ctx: ProviderCallContext, sent: list[str]) -> None:
        self.ctx, self.sent = ctx, sent

    def with_context(self, ctx: ProviderCallContext) -> ReadingTerminal:
        return ReadingTerminal(ctx, self.sent)

    async def __call__(self, config: ProviderConfig, ctx: ProviderCallContext | None = None) -> CompletionResponse:
        if ctx is not None:
            return await self.with_context(ctx)(config)
        assert isinstance(self.ctx.request, ChatRequest)
        self.sent.append(self.ctx.request.messages[-1].text)
        return CompletionResponse(provider="openai", model="m")


def chat(text: str) -> ProviderCallContext:
    return call_context(request=ChatRequest((Message.user(text),)))


async def test_a_layer_below_a_rewrite_gets_the_rewritten_context() -> None:
    below = Seen("below", 100)
    ctx = chat("my secret")
    await MiddlewarePipeline([Rewrite(), below]).run(ctx, CONFIG, ReadingTerminal(ctx, []))
    (seen,) = below.contexts
    assert isinstance(seen.request, ChatRequest) and seen.request.messages[0].text == "my [gone]"


async def test_a_layer_above_a_rewrite_keeps_the_callers_context() -> None:
    above = Seen("above", 900)
    ctx = chat("my secret")
    await MiddlewarePipeline([Rewrite(), above]).run(ctx, CONFIG, ReadingTerminal(ctx, []))
    assert above.contexts == [ctx] and above.contexts[0] is ctx


async def test_the_terminal_sends_the_rewrite_through_layers_that_pass_the_context_on() -> None:
    sent: list[str] = []
    ctx = chat("my secret")
    await MiddlewarePipeline([Rewrite(), Seen("a", 500), Seen("b", 100)]).run(ctx, CONFIG, ReadingTerminal(ctx, sent))
    assert sent == ["my [gone]"]


async def test_a_rewrite_keeps_the_calls_identity() -> None:
    ctx = call_context(request=ChatRequest((Message.user("x"),)), tenant="acme").with_metadata(plugin_key=1)
    rewritten = ctx.with_request(ChatRequest((Message.user("y"),)))
    assert (rewritten.call_id, rewritten.correlation_id, rewritten.attempts) == (ctx.call_id, ctx.correlation_id,
                                                                                 ctx.attempts)
    assert (rewritten.facts.tenant, rewritten.metadata["plugin_key"]) == ("acme", 1)


def test_a_rewrite_to_another_kind_of_request_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="a ChatRequest call cannot send a EmbeddingRequest"):
        chat("x").with_request(EmbeddingRequest(("x",)))


def settings(fake: FakeProvider, **middleware: dict[str, Any]) -> Settings:
    return Settings(configurations={"oa": openai_config(fake)}, default="oa", middleware=middleware)


async def test_the_provider_receives_the_rewritten_request(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(settings(fake), host=builtin_only, middleware=[Rewrite()]) as manager:
        response = await manager.chat("tell no secret")
    assert fake.received[-1].body["messages"][-1]["content"] == "tell no [gone]"
    assert response.text == "echo: tell no [gone]"


async def test_facts_below_a_rewrite_are_the_rewritten_requests(fake: FakeProvider, builtin_only: PluginHost) -> None:
    below = Seen("below", 100)
    async with ServiceManager(settings(fake), host=builtin_only, middleware=[Rewrite(), below]) as manager:
        await manager.chat("secret " * 100)
    (seen,) = below.contexts
    assert seen.facts.estimated_input_tokens == len("[gone] " * 100) // 4 + 1


async def test_the_cache_below_a_rewrite_keys_what_is_sent(fake: FakeProvider, builtin_only: PluginHost) -> None:
    # Two prompts that differ only in what the rewrite removes are one request to the provider.
    cached = settings(fake, cache={"enabled": True, "operations": ["chat"]})
    async with ServiceManager(cached, host=builtin_only, middleware=[Rewrite()]) as manager:
        await manager.chat("a secret", temperature=0)
        again = await manager.chat("a [gone]", temperature=0)
    assert (again.cached, fake.count()) == (True, 1)


async def test_a_rewrite_repeated_by_retry_is_sent_each_time(fake: FakeProvider, builtin_only: PluginHost) -> None:
    from provmw.testing import Fault

    fake.script(Fault(status=503))
    fast = settings(fake, retry={"base_s": 0.001, "max_wait_s": 0.01, "max_attempts": 2})
    async with ServiceManager(fast, host=builtin_only, middleware=[Rewrite()]) as manager:
        await manager.chat("secret")
    assert [r.body["messages"][-1]["content"] for r in fake.received] == ["[gone]", "[gone]"]


def test_a_context_without_a_rewrite_path_keeps_its_facts() -> None:
    ctx = ProviderCallContext(ProviderOperation.CHAT)
    assert ctx.with_request(ChatRequest((Message.user("x"),))).facts is ctx.facts


async def test_a_rewrite_reaching_a_plain_function_terminal_is_refused() -> None:
    async def terminal(config: ProviderConfig) -> CompletionResponse:
        return CompletionResponse(provider="openai", model="m")

    with pytest.raises(ConfigurationError, match="plain function"):
        await MiddlewarePipeline([Rewrite(), Seen("below", 100)]).run(chat("secret"), CONFIG, terminal)


async def test_an_innermost_rewrite_reaching_a_plain_function_terminal_is_refused() -> None:
    async def terminal(config: ProviderConfig) -> CompletionResponse:
        return CompletionResponse(provider="openai", model="m")

    with pytest.raises(ConfigurationError, match="plain function"):
        await MiddlewarePipeline([Rewrite()]).run(chat("secret"), CONFIG, terminal)
