"""The ServiceManager: what host applications call. It wires; the middleware decide."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from provmw.config import ProviderConfig, Secret, check_options, did_you_mean, fallback_chain
from provmw.context import FrozenMap, ProviderCallContext, ProviderOperation
from provmw.errors import ConfigurationError
from provmw.http import HttpClient
from provmw.messages import ContentPart, ImagePart, Message, TextPart, ToolSpec
from provmw.pipeline import Middleware, MiddlewarePipeline
from provmw.plugins import PluginHost
from provmw.pricing import PriceTable
from provmw.providers import ProviderAdapter
from provmw.requests import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    ProviderRequest,
    cache_key,
    caller_scope,
    is_deterministic,
    request_digest,
)
from provmw.responses import (
    Attempt,
    ChatChunk,
    CompletionResponse,
    EmbeddingResponse,
    ProviderResponse,
    VisionResponse,
)
from provmw.settings import Settings, load_settings

__all__ = ["ServiceManager", "StackEntry"]

R = TypeVar("R", bound=ProviderResponse)
Messages = str | Message | Sequence[Message]


@attrs.frozen
class StackEntry:
    """One resolved layer: its name, priority and the plugin that contributed it."""

    name: str
    priority: int
    plugin: str


class ServiceManager:
    """Runs chat, completion, embedding, vision and tool calls through one middleware stack.

    Plugins are discovered and the pipeline is ordered once, here; every call builds its
    typed terminal and context and runs the pipeline exactly once. Use as
    ``async with ServiceManager(...) as manager:`` or call ``aclose()``.
    """

    def __init__(self, settings: Settings | None = None, *, host: PluginHost | None = None,
                 middleware: Iterable[Middleware] = ()) -> None:
        self.settings = settings if settings is not None else Settings()
        self.host = host if host is not None else PluginHost(self.settings.plugins)
        self.host.load()
        self.state = self.host.collect_state(self.settings)
        contributions = self.host.collect_middleware(self.settings, self.state)
        extra = tuple(middleware)
        self.pipeline = MiddlewarePipeline([*(c.middleware for c in contributions), *extra])
        plugins = {c.middleware.name: c.plugin for c in contributions}
        self.stack = tuple(StackEntry(m.name, m.priority, plugins.get(m.name, "(application)"))
                           for m in self.pipeline.middlewares)
        self.controls: frozenset[str] = frozenset().union(
            *(getattr(m, "controls", ()) for m in self.pipeline.middlewares))
        self.providers: Mapping[str, ProviderAdapter] = self.host.collect_providers()
        for config in self.settings.configurations.values():
            self._adapter(config.provider, where=f"[configurations.{config.identifier}] provider")
        self.prices = PriceTable()
        self._http = HttpClient()

    @classmethod
    def from_file(cls, path: str | os.PathLike[str] | None = None, **kwargs: Any) -> ServiceManager:
        """Build from the settings file (see ``provmw.settings`` for the search order)."""
        return cls(load_settings(path), **kwargs)

    async def __aenter__(self) -> ServiceManager:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP session, then let each middleware that has ``aclose`` finish its work
        (the usage ledger writes what it still holds), then close the shared state's connection;
        the manager may not be used afterwards."""
        await self._http.aclose()
        for middleware in self.pipeline.middlewares:
            close = getattr(middleware, "aclose", None)
            if close is not None:
                await close()
        if self.state is not None:
            await self.state.aclose()

    async def chat(self, /, messages: Messages, *, options: Mapping[str, Any] | None = None,
                   **call: Any) -> CompletionResponse:
        """Answer a conversation (a string is one user message)."""
        request = ChatRequest(_messages(messages), options=_options(options))
        return await self._run(ProviderOperation.CHAT, request, _chat, call)

    async def complete(self, /, prompt: str, *, options: Mapping[str, Any] | None = None,
                       **call: Any) -> CompletionResponse:
        """Complete a bare prompt."""
        request = CompletionRequest(prompt, options=_options(options))
        return await self._run(ProviderOperation.COMPLETION, request, _complete, call)

    async def embed(self, /, inputs: str | Sequence[str], *, dimensions: int | None = None,
                    **call: Any) -> EmbeddingResponse:
        """Embed one text or several, returning one vector per input in order."""
        texts = (inputs,) if isinstance(inputs, str) else tuple(inputs)
        if not texts or not all(isinstance(t, str) for t in texts):
            raise ConfigurationError("embed needs one or more strings")
        request = EmbeddingRequest(texts, dimensions)
        return await self._run(ProviderOperation.EMBEDDING, request, _embed, call)

    async def vision(self, /, prompt: str, images: Sequence[ImagePart | str], *,
                     options: Mapping[str, Any] | None = None, **call: Any) -> VisionResponse:
        """Ask about images (parts, or URLs as strings)."""
        parts: list[ContentPart] = [TextPart(prompt)]
        parts += [ImagePart(url=i) if isinstance(i, str) else i for i in images]
        if len(parts) == 1:
            raise ConfigurationError("vision needs at least one image")
        request = ChatRequest((Message.user(parts),), options=_options(options))
        return await self._run(ProviderOperation.VISION, request, _vision, call)

    async def chat_with_tools(self, /, messages: Messages, tools: Sequence[ToolSpec], *,
                              options: Mapping[str, Any] | None = None, **call: Any) -> CompletionResponse:
        """Answer a conversation in which the model may call ``tools``."""
        if not tools:
            raise ConfigurationError("chat_with_tools needs at least one tool")
        request = ChatRequest(_messages(messages), tools=tuple(tools), options=_options(options))
        return await self._run(ProviderOperation.TOOLS, request, _chat, call)

    async def stream_chat(self, messages: Messages, *, options: Mapping[str, Any] | None = None,
                          configuration: str | None = None, **target: Any) -> AsyncIterator[ChatChunk]:
        """Stream an answer; deliberately outside the pipeline (see ADR 0005)."""
        config = self.resolve(configuration, **target)
        request = ChatRequest(_messages(messages), options=_options(options))
        adapter = self._adapter(config.provider)
        async for chunk in adapter.stream_chat(self._http, config, request):
            yield chunk

    def resolve(self, configuration: str | None = None, *, provider: str | None = None,
                model: str | None = None, base_url: str | None = None,
                api_key: str | Secret | None = None, timeout_s: float | None = None) -> ProviderConfig:
        """The configuration a call names, the default one, or an ad-hoc one for provider+model."""
        if provider is None and model is None:
            if base_url is not None or api_key is not None or timeout_s is not None:
                raise ConfigurationError("base_url, api_key and timeout_s need provider= and model=")
            return self.settings.configuration(configuration)
        if configuration is not None or provider is None or model is None:
            raise ConfigurationError("name a configuration, or give both provider= and model=, not a mix")
        self._adapter(provider, where="provider")
        fields: dict[str, Any] = {"base_url": base_url, "api_key": api_key}
        if timeout_s is not None:
            fields["timeout_s"] = timeout_s
        return ProviderConfig.ad_hoc(provider, model, **fields)

    async def _run(self, operation: ProviderOperation, request: ProviderRequest,
                   call_adapter: Callable[[ProviderAdapter, HttpClient, ProviderConfig, Any], Awaitable[R]],
                   call: Mapping[str, Any]) -> R:
        target = {k: call[k] for k in _TARGET_KEYS if k in call}
        people = {k: call[k] for k in _CALL_KEYS if k in call}
        unknown = set(call) - set(_TARGET_KEYS) - set(_CALL_KEYS)
        if unknown:
            name = sorted(unknown)[0]
            raise ConfigurationError(f"unknown argument {name!r}{did_you_mean(name, _ALL_KEYS)}")
        config = self.resolve(**target)
        ctx = self._context(operation, config, request, people)
        adapters, http, prices = self.providers, self._http, self.prices
        attempts: list[Attempt] = []

        # The terminal is the one place that sees every request that reached a provider:
        # it records each attempt and prices each answer.
        async def terminal(chosen: ProviderConfig) -> R:
            try:
                response = await call_adapter(adapters[chosen.provider], http, chosen, request)
            except BaseException as exc:
                attempts.append(Attempt(config_id=chosen.identifier, error_type=type(exc).__name__,
                                        status=getattr(exc, "status", None)))
                raise
            attempts.append(Attempt(config_id=chosen.identifier))
            price = prices.price_for(chosen)
            if price is None or response.usage.cost_usd is not None:
                return response
            return attrs.evolve(response, usage=attrs.evolve(response.usage, cost_usd=price.cost_usd(response.usage)))

        response = await self.pipeline.run(ctx, config, terminal)
        return attrs.evolve(response, attempts=tuple(attempts)) if attempts else response

    def _context(self, operation: ProviderOperation, config: ProviderConfig,
                 request: ProviderRequest, call: Mapping[str, Any]) -> ProviderCallContext:
        user, tenant = call.get("user"), call.get("tenant")
        digest = request_digest(operation, config, request)
        controls = call.get("controls") or {}
        for name in controls:
            if name not in self.controls:
                known = sorted(self.controls)
                raise ConfigurationError(f"controls: no installed middleware reads {name!r}"
                                         f"{did_you_mean(name, known)}; known: {', '.join(known) or 'none'}")
        metadata: dict[str, Any] = {
            "user": user,
            "tenant": tenant,
            "cache_key": cache_key(digest, caller_scope(tenant, user)),
            "shared_cache_key": digest,
            "deterministic": is_deterministic(config, request),
            "estimated_input_tokens": _estimate_tokens(request),
            "call_options": FrozenMap(controls),
        }
        options = getattr(request, "options", {})
        if "max_tokens" in options or "max_tokens" in config.options:
            metadata["max_output_tokens"] = options.get("max_tokens", config.options.get("max_tokens"))
        chain = fallback_chain(config, self.settings.configurations) if config.fallbacks else (config,)
        metadata["planned_cost_usd"] = self.prices.planned_cost_usd(
            chain, metadata["estimated_input_tokens"], metadata.get("max_output_tokens"))
        if call.get("idempotency_key") is not None:
            metadata["idempotency_key"] = call["idempotency_key"]
        if call.get("correlation_id") is not None:
            return ProviderCallContext(operation, call["correlation_id"], metadata)
        return ProviderCallContext(operation, metadata=metadata)

    def _adapter(self, provider: str, where: str = "provider") -> ProviderAdapter:
        try:
            return self.providers[provider]
        except KeyError:
            known = sorted(self.providers)
            raise ConfigurationError(
                f"{where}: no provider adapter named {provider!r}{did_you_mean(provider, known)}; "
                f"installed: {', '.join(known)}"
            ) from None


_TARGET_KEYS = ("configuration", "provider", "model", "base_url", "api_key", "timeout_s")
_CALL_KEYS = ("user", "tenant", "idempotency_key", "correlation_id", "controls")
_ALL_KEYS = (*_TARGET_KEYS, *_CALL_KEYS, "options")


def _messages(messages: Messages) -> tuple[Message, ...]:
    if isinstance(messages, str):
        return (Message.user(messages),)
    if isinstance(messages, Message):
        return (messages,)
    result = tuple(messages)
    if not result or not all(isinstance(m, Message) for m in result):
        raise ConfigurationError("messages must be a string, a Message, or a non-empty list of Message")
    return result


def _options(options: Mapping[str, Any] | None) -> FrozenMap:
    check_options(options or {})
    return FrozenMap(options)


def _estimate_tokens(request: ProviderRequest) -> int:
    """A cheap upper-ish estimate (4 characters a token) for budgets and rate limits."""
    if isinstance(request, EmbeddingRequest):
        chars = sum(len(t) for t in request.inputs)
    elif isinstance(request, CompletionRequest):
        chars = len(request.prompt)
    else:
        chars = sum(len(m.text) for m in request.messages) + 340 * sum(len(m.images) for m in request.messages)
    return chars // 4 + 1


async def _chat(adapter: ProviderAdapter, http: HttpClient, config: ProviderConfig,
                request: ChatRequest) -> CompletionResponse:
    return await adapter.chat(http, config, request)


async def _complete(adapter: ProviderAdapter, http: HttpClient, config: ProviderConfig,
                    request: CompletionRequest) -> CompletionResponse:
    return await adapter.complete(http, config, request)


async def _embed(adapter: ProviderAdapter, http: HttpClient, config: ProviderConfig,
                 request: EmbeddingRequest) -> EmbeddingResponse:
    return await adapter.embed(http, config, request)


async def _vision(adapter: ProviderAdapter, http: HttpClient, config: ProviderConfig,
                  request: ChatRequest) -> VisionResponse:
    answer = await adapter.chat(http, config, request)
    return VisionResponse(**{f.name: getattr(answer, f.name) for f in attrs.fields(CompletionResponse)})
