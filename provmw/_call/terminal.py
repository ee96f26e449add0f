"""The terminal: the innermost step of the onion, built once per manager under the pipeline.

:class:`Terminal` holds what every attempt needs (the adapters, the HTTP client, the price
table, the destination policy, capabilities, credentials and the attempt limits);
:meth:`Terminal.call` binds one call's request to it, and what it returns is the ``terminal``
the pipeline runs: it admits the configuration a layer chose (:meth:`Terminal.admit`: its
credentials, its destination, the capabilities the call needs; once per configuration that
goes out), tells the meters of the call's pass (ADR 0040), sends one attempt within its time
limit, and returns the answer typed, scrubbed, bounded and priced, or the error scrubbed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import attrs

from provmw._base.deadlines import Deadlines
from provmw._call import attempt_log
from provmw._call.facts import output_limit
from provmw.config import ProviderConfig
from provmw.context import AttemptMeter, ProviderCallContext, ProviderOperation, attempt_meters
from provmw.destinations import DestinationGuard
from provmw.errors import AttemptTimeoutError, ConfigurationError, MalformedResponseError
from provmw.http import HttpClient
from provmw.operations import OPERATIONS
from provmw.pools import POOL_PROVIDER
from provmw.pricing import Price, PriceTable
from provmw.providers import Capabilities, ProviderAdapter
from provmw.requests import ChatRequest, ProviderRequest
from provmw.responses import Attempt, Billed, ChatChunk, ProviderResponse, Usage
from provmw.scrubbing import Scrubber
from provmw.stores.usage import billed_for
from provmw.streams import OpenedStream, StreamEnd, open_stream

__all__ = ["METHODS", "Terminal", "end_all"]

R = TypeVar("R", bound=ProviderResponse)


# The adapter method that serves each operation (ProviderAdapter documents them; the operations
# beyond chat, provmw.operations.OPERATIONS).
METHODS: Mapping[ProviderOperation, str] = {
    ProviderOperation.CHAT: "chat",
    ProviderOperation.TOOLS: "chat",
    ProviderOperation.VISION: "chat",
    ProviderOperation.COMPLETION: "complete",
    ProviderOperation.EMBEDDING: "embed",
    **{operation: spec.method for operation, spec in OPERATIONS.items()},
}


async def end_all(streams: Sequence[OpenedStream]) -> None:
    """End each stream unread (a no-op for one already ended), all of them even if cancelled."""
    if streams:
        await asyncio.shield(asyncio.gather(*(s.aclose() for s in streams)))


def attempt_timeout(config: ProviderConfig) -> AttemptTimeoutError:
    return AttemptTimeoutError(f"attempt on {config.identifier!r} exceeded its timeout of {config.timeout_s:g}s",
                               limit_s=config.timeout_s, provider=config.provider, model=config.model)


def answered(response: ProviderResponse, response_type: type[R], config: ProviderConfig, price: Price | None,
             max_output_tokens: int | None, prices: PriceTable | None = None) -> R:
    """An adapter's answer as the call returns it: typed as asked (vision is a chat whose answer is
    typed apart), a key echoed in its names scrubbed, its output within the call's bound (None: a
    stream, bounded at its end), priced."""
    response = Scrubber.for_config(config).answer(response)
    if type(response) is not response_type:
        response = response_type(**{f.name: getattr(response, f.name) for f in attrs.fields(type(response))})
    if max_output_tokens is not None or price is not None:
        within_output_bound(response, output_bound(max_output_tokens, price))
    usage = response.usage
    if price is None or usage.cost_usd is not None:
        return response
    if usage.units and not price.covers(usage.units):
        if prices is not None:
            prices.warn_unpriced_units(config, {u: n for u, n in usage.units.items() if u not in price.units})
        return response
    return attrs.evolve(response, usage=attrs.evolve(usage, cost_usd=price.cost_usd(usage)))


def output_bound(max_output_tokens: int | None, price: Price | None) -> int | None:
    """The most output an answer may report: the call's ``max_tokens``, else the model's ceiling."""
    return max_output_tokens if max_output_tokens is not None or price is None else price.max_output_tokens


def within_output_bound(response: ProviderResponse, bound: int | None) -> None:
    """Refuse an answer that reports more output than the call allowed: a provider stops at
    ``max_tokens`` (or the model's ceiling), so a larger count is a malformed answer, never a
    charge to book."""
    output = response.usage.output_tokens
    if bound is not None and output > bound:
        raise MalformedResponseError(f"the answer reports {output} output tokens, above the call's bound of {bound} "
                                     "(max_tokens, or the model's ceiling)", provider=response.provider,
                                     model=response.model)


async def tell_sending(meters: Sequence[AttemptMeter], config: ProviderConfig, ctx: ProviderCallContext) -> None:
    """Tell each meter an attempt of ``ctx`` is leaving; when one refuses, those already told hear it never left."""
    for told, meter in enumerate(meters):
        try:
            await meter.sending(config, ctx)
        except BaseException:
            await tell_ended(meters[:told], config, "no", None)
            raise


async def tell_ended(meters: Sequence[AttemptMeter], config: ProviderConfig, billed: Billed,
                     usage: Usage | None) -> None:
    for meter in meters:
        await meter.ended(config, billed, usage)


def meter_stream(meters: Sequence[AttemptMeter], config: ProviderConfig, opened: OpenedStream) -> None:
    """Tell ``meters`` of a stream's attempt at its end, with the usage it reported or an estimate."""
    async def ended(end: StreamEnd) -> None:
        await tell_ended(meters, config, "yes", end.response.usage)

    opened.on_end(ended)


class Terminal:
    """What every attempt of a manager's calls goes through, made once with the manager."""

    def __init__(self, *, adapters: Mapping[str, ProviderAdapter], http: HttpClient, prices: PriceTable,
                 destinations: DestinationGuard, capabilities: Mapping[str, Capabilities],
                 credentials: Callable[[ProviderConfig], ProviderConfig]) -> None:
        self.adapters, self.http, self.prices = adapters, http, prices
        self.destinations, self.capabilities, self.credentials = destinations, capabilities, credentials
        self.limits = Deadlines()  # the attempts' time limits, on one loop timer

    async def admit(self, config: ProviderConfig, needs: frozenset[str]) -> ProviderConfig:
        """``config`` as it goes out: its credentials read, its destination checked (an ad-hoc
        ``base_url``), the capabilities the call needs present; raises before anything is sent."""
        if config.provider == POOL_PROVIDER:
            raise ConfigurationError(f"pool {config.identifier!r} reached the provider: the pool layer that "
                                     "chooses its deployment is off ([middleware.pool] enabled = false)")
        config = self.credentials(config)
        if self.destinations.applies_to(config):  # a named configuration is trusted: no await for it
            await self.destinations.check(config)
        self.capabilities[config.provider].require(needs, provider=config.provider, configuration=config.identifier)
        return config

    def call(self, ctx: ProviderCallContext, response_type: type[R], streams: list[OpenedStream] | None) -> Call[R]:
        """The terminal of the call ``ctx`` (``streams``: a stream's call, which collects what it opened)."""
        assert ctx.request is not None
        return Call(self, ctx, ctx.request, response_type, streams)


class Call(Generic[R]):
    """One call's terminal: ``await call(config)`` is one attempt of ``ctx.request``. The configuration
    admitted last is remembered, so the manager's admission before the pipeline and each retry of it
    are one. A layer's rewrite gets a terminal of its own (``with_context``)."""

    __slots__ = ("_admitted", "ctx", "request", "response_type", "streams", "terminal")

    def __init__(self, terminal: Terminal, ctx: ProviderCallContext, request: ProviderRequest,
                 response_type: type[R], streams: list[OpenedStream] | None) -> None:
        self.terminal, self.ctx, self.request, self.response_type, self.streams = \
            terminal, ctx, request, response_type, streams
        self._admitted: tuple[ProviderConfig, ProviderConfig] | None = None

    def with_context(self, ctx: ProviderCallContext) -> Call[R]:
        """This call's terminal for ``ctx``, a layer's rewrite of it: what it sends is ``ctx.request``."""
        assert ctx.request is not None
        return Call(self.terminal, ctx, ctx.request, self.response_type, self.streams)

    async def admit(self, config: ProviderConfig) -> ProviderConfig:
        admitted = self._admitted
        if admitted is not None and admitted[0] is config:
            return admitted[1]
        ready = await self.terminal.admit(config, self.ctx.facts.needs)
        self._admitted = config, ready
        return ready

    async def __call__(self, chosen: ProviderConfig, ctx: ProviderCallContext | None = None) -> R:
        if ctx is not None and ctx is not self.ctx:  # the innermost layer rewrote the request
            return await self.with_context(ctx)(chosen)
        # Again here: a layer may have swapped in another configuration (a fallback, a plugin's).
        chosen = await self.admit(chosen)
        meters, attempts, stream = attempt_meters(), self.ctx.attempts, self.streams is not None
        if meters:  # a strict budget reserves each attempt after the first (ADR 0040)
            await tell_sending(meters, chosen, self.ctx)
        started = attempt_log.start()
        try:
            price = None if stream else self.terminal.prices.price_for(chosen)  # a stream: at its end
            response = answered(await self._send(chosen), self.response_type, chosen, price,
                                None if stream else output_limit(chosen, self.request), self.terminal.prices)
        except BaseException as exc:
            Scrubber.for_config(chosen).error(exc)  # a provider may echo the credentials it was sent
            attempts.record(Attempt(config_id=chosen.identifier, error_type=type(exc).__name__,
                                    status=getattr(exc, "status", None)))
            if started is not None:
                attempt_log.log_attempt(chosen, started, exc)
            if meters:
                await tell_ended(meters, chosen, billed_for(exc), None)
            raise
        attempts.record(Attempt(config_id=chosen.identifier))
        if started is not None:
            attempt_log.log_attempt(chosen, started)
        if stream:
            opened: object = response
            if meters and isinstance(opened, OpenedStream):
                meter_stream(meters, chosen, opened)
            return response
        if meters:
            await tell_ended(meters, chosen, "yes", response.usage)
        # With the call's attempts so far (this one last): the manager adds none after the
        # pipeline unless a later attempt was made (a repair turn).
        return attrs.evolve(response, attempts=tuple(attempts.recorded))

    async def _send(self, config: ProviderConfig) -> ProviderResponse:
        terminal, ctx, request = self.terminal, self.ctx, self.request
        adapter, http = terminal.adapters[config.provider], terminal.destinations.client_for(config, terminal.http)
        if self.streams is not None:
            opened = await open_stream(
                _chunks(adapter, self.terminal.capabilities[config.provider], http, config, request),
                provider=config.provider, model=config.model,
                served_by=config.identifier, first_chunk_s=config.first_chunk_timeout_s or config.timeout_s,
                idle_s=config.stream_idle_timeout_s or config.timeout_s, price=terminal.prices.price_for(config),
                estimated_input_tokens=ctx.facts.estimated_input_tokens,
                max_output_tokens=output_bound(output_limit(config, request), terminal.prices.price_for(config)),
                scrub=Scrubber.for_config(config).error, scrub_chunk=Scrubber.for_config(config).answer)
            self.streams.append(opened)
            return opened
        if ctx.operation is ProviderOperation.RESPONSES and not terminal.capabilities[config.provider].responses:
            return await terminal.limits.run(config.timeout_s, _by_chat(adapter, http, config, request),
                                             lambda: attempt_timeout(config))
        send: Callable[..., Awaitable[ProviderResponse]] = getattr(adapter, METHODS[ctx.operation])
        return await terminal.limits.run(config.timeout_s, send(http, config, request),
                                         lambda: attempt_timeout(config))


_STREAM_RESPOND = OPERATIONS[ProviderOperation.RESPONSES].stream_method or ""


async def _by_chat(adapter: ProviderAdapter, http: HttpClient, config: ProviderConfig,
                   request: ProviderRequest) -> ProviderResponse:
    """A Responses call on an adapter without its wire: translated to a chat and back (ADR 0052)."""
    from provmw.operations import responses_chat  # imported by the first Responses call that needs it

    asked: Any = request  # a ResponsesRequest: the operation says so
    return responses_chat.from_completion(await adapter.chat(http, config, responses_chat.to_chat(asked)), asked)


def _chunks(adapter: ProviderAdapter, offered: Capabilities, http: HttpClient, config: ProviderConfig,
            request: ProviderRequest) -> AsyncIterator[ChatChunk]:
    """The chunks of a stream: a chat's, or a Responses call's on its own wire or translated to chat (ADR 0052)."""
    if isinstance(request, ChatRequest):
        return adapter.stream_chat(http, config, request)
    if offered.responses:
        opens: Callable[..., AsyncIterator[ChatChunk]] = getattr(adapter, _STREAM_RESPOND)
        return opens(http, config, request)
    from provmw.operations import responses_chat

    asked: Any = request  # a ResponsesRequest: only a chat's and a Responses call's streams open
    return adapter.stream_chat(http, config, responses_chat.to_chat(asked))
