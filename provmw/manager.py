"""The ServiceManager: what host applications call. It wires; the middleware decide."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import warnings
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from typing import Any, TypeVar, Unpack

import attrs

from provmw._call.ad_hoc import environment_key
from provmw._call.arguments import CallArguments, call_options
from provmw._call.facts import call_facts
from provmw._call.operation_calls import OperationCalls, new_homes
from provmw._call.terminal import Terminal, end_all
from provmw.config import GenerationOptions, ProviderConfig, Secret, fallback_chain
from provmw.context import Principal, ProviderCallContext, ProviderOperation
from provmw.destinations import DestinationGuard
from provmw.errors import ConfigurationError
from provmw.http import HttpClient
from provmw.messages import ContentPart, ImagePart, Message, TextPart, ToolSpec, messages_from
from provmw.options import did_you_mean
from provmw.pipeline import Middleware, MiddlewarePipeline
from provmw.plugins import PluginHost, refuse_clashes
from provmw.pools import POOL_PROVIDER, refuse_unservable
from provmw.pricing import PriceTable
from provmw.providers import Capabilities, ProviderAdapter, capabilities_of
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest, ProviderRequest
from provmw.responses import (
    ChatChunk,
    CompletionResponse,
    EmbeddingResponse,
    ProviderResponse,
    VisionResponse,
)
from provmw.settings import Settings, load_settings
from provmw.state import open_state
from provmw.streams import OpenedStream, StreamEnd
from provmw.structured import parsed_answer, parsed_stream, schema_of

__all__ = ["ServiceManager", "StackEntry"]

R = TypeVar("R", bound=ProviderResponse)
Messages = str | Message | Sequence[Message | Mapping[str, Any]]
ResponseSchema = Mapping[str, Any] | type


log = logging.getLogger(__name__)
_LEFT_OPEN = ("a ServiceManager was not closed and its HTTP client is still open: use "
              "'async with ServiceManager(...) as manager:' or await manager.aclose() "
              "(SyncServiceManager: 'with' or close())")


@attrs.frozen
class StackEntry:
    """One resolved layer: its name, priority and the plugin that contributed it."""

    name: str
    priority: int
    plugin: str


class ServiceManager(OperationCalls):
    """Runs chat, completion, embedding, vision and tool calls, and the operations of
    ``provmw.operations`` (``OperationCalls``), through one middleware stack.

    Plugins are discovered and the pipeline is ordered once, here; every call builds its
    typed terminal and context and runs the pipeline exactly once. ``http`` is the one
    HTTP client of the manager (made here when not given) and is closed with it. Use as
    ``async with ServiceManager(...) as manager:`` or call ``aclose()``.

    Every call method takes the same keyword arguments: ``configuration`` (a named one; the
    default otherwise), ``user`` and ``tenant`` (strings: who budgets, usage and the cache
    count the call for), ``controls`` (per-call middleware controls), ``idempotency_key``,
    ``correlation_id``, or an ad-hoc target instead of a configuration: ``provider`` and
    ``model``, with ``base_url``, ``api_key`` and ``timeout_s``. An ad-hoc ``base_url`` must
    pass the settings' destination policy (``provmw.destinations``) before anything is sent.

    A call its configuration's adapter cannot serve (its ``capabilities``: tools, images, a
    ``response_schema``, ``response_format``...) is refused with ``UnsupportedOperationError``
    before anything is sent; a fallback that cannot is skipped (ADR 0024).
    """

    def __init__(self, settings: Settings | None = None, *, host: PluginHost | None = None,
                 middleware: Iterable[Middleware] = (), http: HttpClient | None = None) -> None:
        self.settings = settings if settings is not None else Settings()
        self.host = host if host is not None else PluginHost(self.settings.plugins)
        self.host.load()
        self.state = open_state(self.settings, self.host.collect_state(self.settings),
                                ledger=self.host.collect_ledger(self.settings))
        contributions = self.host.collect_middleware(self.settings, self.state)
        middleware = tuple(middleware)
        plugins = {c.middleware.name: c.plugin for c in contributions}
        refuse_clashes(plugins, middleware)
        self.pipeline = MiddlewarePipeline([*(c.middleware for c in contributions), *middleware])
        self.stack = tuple(StackEntry(m.name, m.priority, plugins.get(m.name, "(application)"))
                           for m in self.pipeline.middlewares)
        self.providers: Mapping[str, ProviderAdapter] = self.host.collect_providers(self.settings)
        self.capabilities: Mapping[str, Capabilities] = {n: capabilities_of(a) for n, a in self.providers.items()}
        for config in self.settings.configurations.values():
            if config.provider != POOL_PROVIDER:
                self._adapter(config.provider,
                              where=f"{self.settings.source}: [configurations.{config.identifier}] provider")
        # Each pool's deployments, for the facts of a call whose chain holds the pool.
        self._deployments = {name: tuple(self.settings.configurations[m] for m in pool.members)
                             for name, pool in self.settings.pools.items()}
        self.prices = PriceTable()
        http = http if http is not None else HttpClient(limits=self.settings.http)
        # Ad-hoc base_urls go through a client of their own, whose resolver checks (ADR 0018).
        self.destinations = DestinationGuard(self.settings.destinations, limits=self.settings.http)
        self._streams: dict[int, OpenedStream] = {}  # opened and not yet ended, by their state's id
        self._homes = new_homes()
        self.terminal = Terminal(adapters=self.providers, http=http, prices=self.prices,
                                 destinations=self.destinations, capabilities=self.capabilities,
                                 credentials=self.settings.with_credentials)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str] | None = None, *, host: PluginHost | None = None,
                  middleware: Iterable[Middleware] = (), http: HttpClient | None = None) -> ServiceManager:
        """Build from the settings file (see ``provmw.settings`` for the search order)."""
        return cls(load_settings(path), host=host, middleware=middleware, http=http)

    async def __aenter__(self) -> ServiceManager:
        return self

    @property
    def http(self) -> HttpClient:
        """The manager's one HTTP client (given at construction, or made then), which its terminal
        sends every attempt through and ``aclose`` closes; read only, so a replaced client cannot be
        one the calls never use."""
        return self.terminal.http

    def __del__(self) -> None:
        # aiohttp's "Unclosed client session" names neither provmw nor the fix; say both first.
        # Cheap, and never raising: it may run half-built or at interpreter exit.
        with contextlib.suppress(Exception):
            if _left_open(self.http) or _left_open(self.destinations.http):
                # a warning for test runs and -W; a log line, which Python shows by default, for the rest
                log.warning(_LEFT_OPEN)  # first: under -W error the warning raises (and is suppressed)
                warnings.warn(_LEFT_OPEN, ResourceWarning, source=self, stacklevel=1)

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """End the streams still open (their records and settles go in), then close the HTTP
        client, the middleware that hold resources and the state (the usage ledger writes what
        it still holds); the manager may not be used afterwards."""
        await end_all(list(self._streams.values()))
        try:
            await self.http.aclose()
            await self.destinations.aclose()
        finally:
            try:
                await self.pipeline.aclose()
            finally:
                await self.state.aclose()

    async def chat(self, /, messages: Messages, *, options: Mapping[str, Any] | None = None,
                   configuration: str | None = None, user: str | None = None, tenant: str | None = None,
                   controls: Mapping[str, Any] | None = None, idempotency_key: str | None = None,
                   correlation_id: str | None = None, provider: str | None = None, model: str | None = None,
                   base_url: str | None = None, api_key: str | Secret | None = None,
                   timeout_s: float | None = None,
                   principal: Principal | None = None, response_schema: ResponseSchema | None = None,
                   **option_args: Unpack[GenerationOptions]) -> CompletionResponse:
        """Answer a conversation (a string is one user message); with ``response_schema`` (a JSON
        Schema dict or a pydantic model class) the answer is JSON that follows it, in ``parsed``."""
        request = ChatRequest(messages_from(messages), options=call_options(options, option_args),
                              response_schema=schema_of(response_schema))
        return await self._run(ProviderOperation.CHAT, request, CompletionResponse, CallArguments(
            configuration, user, tenant, controls, idempotency_key, correlation_id, provider, model, base_url,
            api_key, timeout_s, principal))

    async def complete(self, /, prompt: str, *, options: Mapping[str, Any] | None = None,
                       configuration: str | None = None, user: str | None = None, tenant: str | None = None,
                       controls: Mapping[str, Any] | None = None, idempotency_key: str | None = None,
                       correlation_id: str | None = None, provider: str | None = None, model: str | None = None,
                       base_url: str | None = None, api_key: str | Secret | None = None,
                       timeout_s: float | None = None, principal: Principal | None = None,
                       **option_args: Unpack[GenerationOptions]) -> CompletionResponse:
        """Complete a bare prompt."""
        request = CompletionRequest(prompt, options=call_options(options, option_args))
        return await self._run(ProviderOperation.COMPLETION, request, CompletionResponse, CallArguments(
            configuration, user, tenant, controls, idempotency_key, correlation_id, provider, model, base_url,
            api_key, timeout_s, principal))

    async def embed(self, /, inputs: str | Sequence[str], *, dimensions: int | None = None,
                    configuration: str | None = None, user: str | None = None, tenant: str | None = None,
                    controls: Mapping[str, Any] | None = None, idempotency_key: str | None = None,
                    correlation_id: str | None = None, provider: str | None = None, model: str | None = None,
                    base_url: str | None = None, api_key: str | Secret | None = None,
                    timeout_s: float | None = None, principal: Principal | None = None) -> EmbeddingResponse:
        """Embed one text or several, returning one vector per input in order."""
        texts = (inputs,) if isinstance(inputs, str) else tuple(inputs)
        if not texts or not all(isinstance(t, str) for t in texts):
            raise ConfigurationError("embed needs one or more strings")
        request = EmbeddingRequest(texts, dimensions)
        return await self._run(ProviderOperation.EMBEDDING, request, EmbeddingResponse, CallArguments(
            configuration, user, tenant, controls, idempotency_key, correlation_id, provider, model, base_url,
            api_key, timeout_s, principal))

    async def vision(self, /, prompt: str, images: Sequence[ImagePart | str], *,
                     options: Mapping[str, Any] | None = None,
                     configuration: str | None = None, user: str | None = None, tenant: str | None = None,
                     controls: Mapping[str, Any] | None = None, idempotency_key: str | None = None,
                     correlation_id: str | None = None, provider: str | None = None, model: str | None = None,
                     base_url: str | None = None, api_key: str | Secret | None = None,
                     timeout_s: float | None = None, principal: Principal | None = None,
                     **option_args: Unpack[GenerationOptions]) -> VisionResponse:
        """Ask about images (parts, or URLs as strings)."""
        parts: list[ContentPart] = [TextPart(prompt)]
        parts += [ImagePart(url=i) if isinstance(i, str) else i for i in images]
        if len(parts) == 1:
            raise ConfigurationError("vision needs at least one image")
        request = ChatRequest((Message.user(parts),), options=call_options(options, option_args))
        return await self._run(ProviderOperation.VISION, request, VisionResponse, CallArguments(
            configuration, user, tenant, controls, idempotency_key, correlation_id, provider, model, base_url,
            api_key, timeout_s, principal))

    async def chat_with_tools(self, /, messages: Messages, tools: Sequence[ToolSpec | Mapping[str, Any]], *,
                              options: Mapping[str, Any] | None = None,
                              configuration: str | None = None, user: str | None = None, tenant: str | None = None,
                              controls: Mapping[str, Any] | None = None, idempotency_key: str | None = None,
                              correlation_id: str | None = None, provider: str | None = None,
                              model: str | None = None, base_url: str | None = None,
                              api_key: str | Secret | None = None, timeout_s: float | None = None,
                              principal: Principal | None = None,
                              response_schema: ResponseSchema | None = None,
                              **option_args: Unpack[GenerationOptions]) -> CompletionResponse:
        """Answer a conversation in which the model may call ``tools``; ``response_schema`` as for ``chat``
        (the final answer follows it; a turn that calls tools has no ``parsed``)."""
        if not tools:
            raise ConfigurationError("chat_with_tools needs at least one tool")
        request = ChatRequest(messages_from(messages), tools=tools, options=call_options(options, option_args),
                              response_schema=schema_of(response_schema))
        return await self._run(ProviderOperation.TOOLS, request, CompletionResponse, CallArguments(
            configuration, user, tenant, controls, idempotency_key, correlation_id, provider, model, base_url,
            api_key, timeout_s, principal))

    async def stream_chat(self, /, messages: Messages, *, options: Mapping[str, Any] | None = None,
                          configuration: str | None = None, user: str | None = None, tenant: str | None = None,
                          controls: Mapping[str, Any] | None = None, idempotency_key: str | None = None,
                          correlation_id: str | None = None, provider: str | None = None,
                          model: str | None = None, base_url: str | None = None,
                          api_key: str | Secret | None = None, timeout_s: float | None = None,
                          principal: Principal | None = None,
                          response_schema: ResponseSchema | None = None,
                          **option_args: Unpack[GenerationOptions]) -> AsyncGenerator[ChatChunk, None]:
        """Stream an answer: opening it (to its first content chunk) goes through the pipeline,
        the chunks after it do not (ADR 0005); a failure after the first chunk raises
        ``StreamInterruptedError``. Every chunk names the configuration that serves it
        (``served_by``) and the attempts before it; the last carries the finish reason and usage.

        With ``response_schema`` (as for ``chat``) the answer is checked at the end of the stream:
        the last chunk carries ``parsed``; an answer that does not follow the schema raises
        ``StructuredOutputError`` after its last chunk. Unlike ``chat``, a stream gets no repair
        turn: its chunks are already read, so an invalid answer is not asked for again.
        """
        request = ChatRequest(messages_from(messages), options=call_options(options, option_args),
                              response_schema=schema_of(response_schema))
        async with contextlib.aclosing(self._stream(ProviderOperation.CHAT, request, CallArguments(
                configuration, user, tenant, controls, idempotency_key, correlation_id, provider, model, base_url,
                api_key, timeout_s, principal))) as chunks:  # a caller who stops: the end runs now
            async for chunk in chunks:
                yield chunk

    async def stream_chat_with_tools(self, /, messages: Messages, tools: Sequence[ToolSpec | Mapping[str, Any]], *,
                                     options: Mapping[str, Any] | None = None, configuration: str | None = None,
                                     user: str | None = None, tenant: str | None = None,
                                     controls: Mapping[str, Any] | None = None, idempotency_key: str | None = None,
                                     correlation_id: str | None = None, provider: str | None = None,
                                     model: str | None = None, base_url: str | None = None,
                                     api_key: str | Secret | None = None, timeout_s: float | None = None,
                                     principal: Principal | None = None,
                                     response_schema: ResponseSchema | None = None,
                                     **option_args: Unpack[GenerationOptions]) -> AsyncGenerator[ChatChunk, None]:
        """Stream an answer in which the model may call ``tools``: each call comes whole, once,
        in a chunk's ``tool_calls``; ``response_schema`` as for ``stream_chat`` (a turn that calls
        tools has no ``parsed``)."""
        if not tools:
            raise ConfigurationError("stream_chat_with_tools needs at least one tool")
        request = ChatRequest(messages_from(messages), tools=tools, options=call_options(options, option_args),
                              response_schema=schema_of(response_schema))
        async with contextlib.aclosing(self._stream(ProviderOperation.TOOLS, request, CallArguments(
                configuration, user, tenant, controls, idempotency_key, correlation_id, provider, model, base_url,
                api_key, timeout_s, principal))) as chunks:  # a caller who stops: the end runs now
            async for chunk in chunks:
                yield chunk

    async def _stream(self, operation: ProviderOperation, request: ProviderRequest,
                      call: CallArguments) -> AsyncGenerator[ChatChunk, None]:
        opened = await self._open(operation, request, call)
        schema = getattr(request, "response_schema", None)
        async with contextlib.aclosing(opened.chunks()) as read:
            chunks = read if schema is None else parsed_stream(read, schema, provider=opened.provider,
                                                               model=opened.model)
            async with contextlib.aclosing(chunks):
                async for chunk in chunks:
                    yield chunk

    def resolve(self, configuration: str | None = None, *, provider: str | None = None,
                model: str | None = None, base_url: str | None = None,
                api_key: str | Secret | None = None, timeout_s: float | None = None) -> ProviderConfig:
        """The configuration a call names, the default one, or an ad-hoc one for provider+model."""
        if provider is None and model is None:
            if base_url is not None or api_key is not None or timeout_s is not None:
                raise ConfigurationError("base_url, api_key and timeout_s need provider= and model=")
            return self.settings.named(configuration)
        if configuration is not None or provider is None or model is None:
            raise ConfigurationError("name a configuration, or give both provider= and model=, not a mix")
        adapter = self._adapter(provider, where="provider")
        fields: dict[str, Any] = {"base_url": base_url, "api_key": api_key if api_key is not None
                                  else environment_key(adapter, base_url)}
        if timeout_s is not None:
            fields["timeout_s"] = timeout_s
        return ProviderConfig.ad_hoc(provider, model, **fields)

    def _facts(self, operation: ProviderOperation, request: ProviderRequest,
               call: CallArguments, *, stream: bool = False) -> tuple[ProviderConfig, ProviderCallContext]:
        config = self.resolve(call.configuration, provider=call.provider, model=call.model,
                              base_url=call.base_url, api_key=call.api_key, timeout_s=call.timeout_s)
        chain = fallback_chain(config, self.settings.configurations) if config.fallbacks else (config,)
        deployments = self._deployments
        pools = {c.identifier: deployments[c.identifier] for c in chain if c.identifier in deployments} \
            if deployments else None
        facts = call_facts(operation, config, request, chain=chain, prices=self.prices,
                           known_controls=self.pipeline.controls, user=call.user, tenant=call.tenant,
                           controls=call.controls, idempotency_key=call.idempotency_key,
                           capabilities=self.capabilities, stream=stream, pools=pools, principal=call.principal)
        if call.correlation_id is not None:
            return config, ProviderCallContext(operation, call.correlation_id, facts=facts, request=request)
        return config, ProviderCallContext(operation, facts=facts, request=request)

    _open_stream = _stream

    async def _open(self, operation: ProviderOperation, request: ProviderRequest, call: CallArguments) -> OpenedStream:
        if call.idempotency_key is not None:
            raise ConfigurationError("idempotency_key applies to unary calls: a stream is not replayed (ADR 0005)")
        # Every stream a terminal opened for this call: one a layer drops (a hedge's loser, an
        # outer layer that fails or is cancelled after it opened) is ended here, its end run;
        # and one the caller still reads when the manager closes is ended by ``aclose``.
        streams: list[OpenedStream] = []
        try:
            opened = await self._run(operation, request, OpenedStream, call, streams=streams)
            self._streams[id(opened.stream)] = opened
            opened.on_end(functools.partial(self._forget_stream, id(opened.stream)))
        except BaseException:
            await end_all(streams)
            raise
        try:
            await end_all([s for s in streams if s.stream is not opened.stream])
        except BaseException:
            await opened.aclose()
            raise
        return opened

    async def _forget_stream(self, key: int, end: StreamEnd) -> None:
        self._streams.pop(key, None)

    async def _run(self, operation: ProviderOperation, request: ProviderRequest, response_type: type[R],
                   call: CallArguments, *, streams: list[OpenedStream] | None = None) -> R:
        config, ctx = self._facts(operation, request, call, stream=streams is not None)
        terminal = self.terminal.call(ctx, response_type, streams)
        # Before the pipeline: nothing reserved or counted for a call refused here.
        if config.provider == POOL_PROVIDER:
            refuse_unservable(config, ctx.facts.unmet, self._deployments.get(config.identifier, ()))
        else:
            await terminal.admit(config)
        response = await self.pipeline.run(ctx, config, terminal)
        schema = ctx.facts.response_schema
        judged = isinstance(response, CompletionResponse) or operation is ProviderOperation.RESPONSES
        if schema is not None and judged and getattr(response, "parsed", None) is None:
            response = parsed_answer(response, schema)  # type: ignore[type-var]  # the layer off: no repair
        recorded = tuple(ctx.attempts.recorded)
        return attrs.evolve(response, attempts=recorded) if recorded and response.attempts != recorded else response

    def _adapter(self, provider: str, where: str = "provider") -> ProviderAdapter:
        try:
            return self.providers[provider]
        except KeyError:
            known = sorted(self.providers)
            raise ConfigurationError(
                f"{where}: no provider adapter named {provider!r}{did_you_mean(provider, known)}; "
                f"installed: {', '.join(known)}"
            ) from None



def _left_open(http: HttpClient) -> bool:
    """Whether ``http`` opened a session that is still open (``aclose`` sets it back to None)."""
    session = http._session  # the manager owns this client, and only looks at it
    return session is not None and not session.closed
