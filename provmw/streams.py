"""Streamed answers: the stream the pipeline opens, its end, and the pieces adapters assemble.

Opening a stream goes through the pipeline like a unary call (ADR 0005): the stream
terminal sends the request and reads until the first content chunk, then returns an
``OpenedStream``, so fallback, retry, breakers, limits, deadline and budget reservation
apply to the opening unchanged. The chunks after it are read outside the pipeline. A layer
that needs the end registers a callback; it runs exactly once, when the stream completes,
fails, or the caller stops reading (``break``, cancellation, an iterator dropped unclosed)::

    response = await next(config)
    if isinstance(response, OpenedStream):
        response.on_end(lambda end: settle(end.response.usage))  # end: a StreamEnd
        return response

A layer may also register a :class:`ChunkFilter` at opening (``response.filter_chunks(f)``):
it sees every chunk before the caller, and may rewrite it, hold it back (a bounded window,
so that a value cut across chunks can still be recognised), or end the stream by raising
(ADR 0005). The end-of-stream callbacks see what the provider sent, and still run once.

``ToolCallAssembler`` is for adapters: a provider streams each tool call in pieces (its id
and name first, then its arguments as JSON text cut anywhere); the assembler joins them by
call id, then by index, and hands out complete calls whose arguments are whole JSON.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

import attrs

from provmw._base.timers import WaitLimit
from provmw.errors import (
    FirstChunkTimeoutError,
    InvalidDataError,
    MalformedResponseError,
    ProviderTimeoutError,
    StreamInterruptedError,
)
from provmw.messages import ToolCall
from provmw.pricing import Price
from provmw.responses import ChatChunk, CompletionResponse, ProviderResponse, Usage

__all__ = ["END_KEPT_CHARS", "ChunkFilter", "EndCallback", "OpenedStream", "StreamEnd", "ToolCallAssembler",
           "open_stream"]

log = logging.getLogger(__name__)

# What a stream keeps for its end, text and tool calls together: 128k output tokens are about
# 512k characters, so a real answer fits whole; a stream of hundreds of MiB, read by a caller
# who kept none of it, costs this much memory, not its size.
END_KEPT_CHARS = 1 << 20


@attrs.frozen(kw_only=True)
class StreamEnd:
    """How a stream ended, handed once to each end-of-stream callback.

    ``response`` is what was streamed, assembled: text, tool calls, finish reason, and the
    usage (priced) the provider reported, or, when it never came (the stream was cut or the
    caller stopped reading), an estimate from the chunks seen (``usage_estimated``).
    ``error`` is what stopped the stream early; ``abandoned`` that the caller stopped.
    The text and tool calls kept are bounded (``END_KEPT_CHARS`` characters together, far
    above a real answer): past it ``truncated`` is set and ``response`` holds the first of
    them; an estimate still counts every character streamed.
    """

    response: CompletionResponse
    error: BaseException | None = None
    abandoned: bool = False
    usage_estimated: bool = False
    truncated: bool = False

    @property
    def completed(self) -> bool:
        return self.error is None and not self.abandoned


EndCallback = Callable[[StreamEnd], Awaitable[None]]


class ChunkFilter(Protocol):
    """What a layer puts between a stream's chunks and its caller (``OpenedStream.filter_chunks``).

    ``chunk`` is given every chunk the provider sent, in order, and returns what to hand on
    now: the chunk, a rewrite of it, several, or none (held back). The provider's last chunk
    carries its ``finish_reason``: hand on what is held with it. ``end`` is called once, when
    the provider's chunks are all given (or the stream was cut short), and returns what is
    still held. Either may raise (a ``GuardRefusedError``) to end the stream: the caller gets
    that error as raised, and the end-of-stream callbacks run once. Hold back no more than a
    value cut across chunks needs: the caller waits for what is held.
    """

    def chunk(self, chunk: ChatChunk) -> Sequence[ChatChunk]:
        """What to hand on for ``chunk``."""
        ...

    def end(self) -> Sequence[ChatChunk]:
        """What is still held, at the end of the provider's chunks."""
        ...


@attrs.define(eq=False)
class _Stream:
    """The one mutable part of an opened stream, shared by every copy ``attrs.evolve`` makes."""

    head: list[ChatChunk]
    rest: AsyncIterator[ChatChunk]
    idle_s: float
    price: Price | None
    estimated_input_tokens: int
    max_output_tokens: int | None
    scrub: Callable[[BaseException], object]
    callbacks: list[EndCallback] = attrs.Factory(list)
    filters: list[ChunkFilter] = attrs.Factory(list)
    ended: bool = False
    scrub_chunk: Callable[[ChatChunk], ChatChunk] | None = None


@attrs.frozen(kw_only=True)
class OpenedStream(ProviderResponse):
    """The pipeline's answer to a streamed call: opened, its first content chunk in hand.

    Read it once with ``chunks()``; ``on_end`` registers what must run at its end.
    """

    TYPE = "opened_stream"

    stream: _Stream = attrs.field(eq=False, repr=False)

    def on_end(self, callback: EndCallback) -> None:
        """Run ``callback(StreamEnd)`` once at the end; inner layers' callbacks run first."""
        self.stream.callbacks.append(callback)

    def filter_chunks(self, chunk_filter: ChunkFilter) -> None:
        """Pass every chunk through ``chunk_filter`` before the caller; inner layers' filters see them first."""
        self.stream.filters.append(chunk_filter)

    def to_dict(self) -> dict[str, Any]:
        raise TypeError("an opened stream is read, not stored")

    async def chunks(self) -> AsyncGenerator[ChatChunk, None]:
        """The chunks, the opening's first; a failure after it is a ``StreamInterruptedError``."""
        reading, filters = _Reading(self), self.stream.filters
        try:
            for chunk in self.stream.head:
                for out in reading.passed(chunk, filters):
                    yield out
            cut: Exception | None = None
            try:
                while (more := await reading.next_chunk()) is not None:
                    for out in reading.passed(more, filters):
                        yield out
            except Exception as exc:  # the provider's stream failed: what the filters hold still goes out
                if not filters or exc is reading.refused:
                    raise
                cut = exc
            if filters:
                for out in _through(filters, (), reading, ending=True):
                    yield out
            if cut is not None:
                raise cut
        except GeneratorExit:
            await self._end(reading, abandoned=True)
            raise
        except BaseException as exc:
            cancelled = isinstance(exc, asyncio.CancelledError)
            self.stream.scrub(exc)
            await self._end(reading, error=None if cancelled else exc, abandoned=cancelled)
            if cancelled or exc is reading.refused:
                raise
            raise reading.interrupted(exc) from exc
        await self._end(reading)

    async def aclose(self) -> None:
        """End the stream unread, if nothing has ended it: the callbacks run, as abandoned."""
        await self._end(_Reading(self), abandoned=True)

    async def _end(self, reading: _Reading, *, error: BaseException | None = None, abandoned: bool = False) -> None:
        state = self.stream
        if state.ended:
            return
        state.ended = True
        reading.limit.close()
        end = reading.end(error, abandoned)
        # Shielded, closing included: a caller cancelled again while the adapter's stream closes
        # or the callbacks settle must not lose a record.
        await asyncio.shield(asyncio.get_running_loop().create_task(_finish(state, end)))


def _through(filters: Sequence[ChunkFilter], chunks: Iterable[ChatChunk], reading: _Reading, *,
             ending: bool) -> list[ChatChunk]:
    """``chunks`` through each filter in turn (``ending``: each then gives what it holds); what a
    filter raises is noted as its refusal."""
    try:
        for chunk_filter in filters:
            passed = [out for chunk in chunks for out in chunk_filter.chunk(chunk)]
            chunks = [*passed, *chunk_filter.end()] if ending else passed
        return list(chunks)
    except BaseException as exc:
        reading.refused = exc
        raise


@attrs.define
class _Pieces:
    id: str | None
    name: str | None
    arguments: list[str] = attrs.Factory(list)


class ToolCallAssembler:
    """Joins streamed tool-call pieces into complete ``ToolCall``s, in the order they began.

    A piece that names an id belongs to that id's call (a new id begins a new call, even at
    an index already used, as some servers stream parallel calls); a piece without one
    belongs to the call last begun at its ``index``.
    """

    def __init__(self) -> None:
        self._calls: list[_Pieces] = []
        self._by_id: dict[str, _Pieces] = {}
        self._by_index: dict[int, _Pieces] = {}

    def add(self, index: int, *, id: str | None = None, name: str | None = None, arguments: str = "") -> None:
        """One piece of the call at ``index``: any of its id, its name, a piece of its arguments."""
        call = self._by_id.get(id) if id else self._by_index.get(index)
        if call is None:
            call = _Pieces(id or None, name or None)
            self._calls.append(call)
            if id:
                self._by_id[id] = call
        self._by_index[index] = call
        call.name = call.name or name or None
        if arguments:
            call.arguments.append(arguments)

    def calls(self) -> tuple[ToolCall, ...]:
        """The complete calls; ``InvalidDataError`` names a call without id or name, or whose
        arguments are not one JSON value (empty arguments are ``{}``)."""
        return tuple(_complete(i, call) for i, call in enumerate(self._calls))


def _complete(position: int, call: _Pieces) -> ToolCall:
    where = f"streamed tool call {position}"
    if not call.id or not call.name:
        raise InvalidDataError(f"{where} has no {'id' if not call.id else 'name'}")
    arguments = "".join(call.arguments).strip() or "{}"
    try:
        json.loads(arguments)
    except ValueError:
        raise InvalidDataError(f"{where} ({call.name!r}): its arguments are not complete JSON") from None
    return ToolCall(id=call.id, name=call.name, arguments=arguments)


class _Reading:
    """What one read of a stream has seen so far: enough to assemble its end."""

    def __init__(self, opened: OpenedStream) -> None:
        self.opened = opened
        self.limit = WaitLimit()
        self.text: list[str] = []
        self.tool_calls: list[ToolCall] = []
        self.text_chars = 0  # every character streamed, kept or not: what an estimate counts
        self.kept_chars = 0
        self.truncated = False
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.count = 0
        self.refused: BaseException | None = None  # what a chunk filter raised: the caller gets it as it is

    def passed(self, chunk: ChatChunk, filters: Sequence[ChunkFilter]) -> Sequence[ChatChunk]:
        """What the caller gets for ``chunk``: noted, then through the filters, if any."""
        seen = self.saw(chunk)
        return _through(filters, (seen,), self, ending=False) if filters else (seen,)

    def saw(self, chunk: ChatChunk) -> ChatChunk:
        """Note ``chunk`` and return it, its usage priced, naming who served it."""
        opened = self.opened
        if (scrub_chunk := opened.stream.scrub_chunk) is not None:
            chunk = scrub_chunk(chunk)
        if chunk.served_by != opened.served_by or chunk.attempts != opened.attempts:
            chunk = attrs.evolve(chunk, served_by=opened.served_by, attempts=opened.attempts)
        self.count += 1
        if chunk.text:
            self.text_chars += len(chunk.text)
            if kept := self._keep(len(chunk.text)):
                self.text.append(chunk.text[:kept])
        for call in chunk.tool_calls:
            if self._keep(len(call.id) + len(call.name) + len(call.arguments), whole=True):
                self.tool_calls.append(call)
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        if chunk.usage is not None:
            price = opened.stream.price
            if price is not None and chunk.usage.cost_usd is None:
                chunk = attrs.evolve(chunk, usage=attrs.evolve(chunk.usage, cost_usd=price.cost_usd(chunk.usage)))
            self.usage = chunk.usage
        return chunk

    def _keep(self, size: int, *, whole: bool = False) -> int:
        """How many of ``size`` characters the end keeps (a ``whole`` piece: all or none); once
        one is cut, none after it, so the end holds a beginning of the stream."""
        room = 0 if self.truncated else END_KEPT_CHARS - self.kept_chars
        kept = size if size <= room else 0 if whole else room
        self.kept_chars += kept
        self.truncated = self.truncated or kept < size
        return kept

    async def next_chunk(self) -> ChatChunk | None:
        limit, state = self.limit, self.opened.stream
        limit.start(limit.loop_time() + state.idle_s)
        try:
            return await anext(state.rest)
        except StopAsyncIteration:
            return None
        except asyncio.CancelledError:
            if not limit.expired():
                raise
            raise ProviderTimeoutError(f"no chunk for {state.idle_s:g}s (stream_idle_timeout_s)",
                                       provider=self.opened.provider, model=self.opened.model) from None
        finally:
            limit.stop()

    def interrupted(self, exc: BaseException) -> StreamInterruptedError:
        opened = self.opened
        return StreamInterruptedError(
            f"stream from {opened.served_by!r} failed after {self.count} chunk(s): {type(exc).__name__}: {exc}",
            chunks=self.count, provider=opened.provider, model=opened.model, status=getattr(exc, "status", None))

    def end(self, error: BaseException | None, abandoned: bool) -> StreamEnd:
        opened, state = self.opened, self.opened.stream
        text = "".join(self.text)
        usage, estimated = self.usage, False
        if usage is not None and state.max_output_tokens is not None and usage.output_tokens > state.max_output_tokens:
            log.error("stream from %r reported %d output tokens, above the call's bound of %d: a malformed count, "
                      "settled at an estimate", opened.served_by, usage.output_tokens, state.max_output_tokens)
            usage = None
        if usage is None:
            # Never above the bound the budget reserved on: an estimate is no reason to overspend.
            output = self.text_chars // 4 + 1
            if state.max_output_tokens is not None:
                output = min(output, state.max_output_tokens)
            usage, estimated = Usage(input_tokens=state.estimated_input_tokens, output_tokens=output), True
        if state.price is not None and usage.cost_usd is None:
            usage = attrs.evolve(usage, cost_usd=state.price.cost_usd(usage))
        response = CompletionResponse(provider=opened.provider, model=opened.model, served_by=opened.served_by,
                                      attempts=opened.attempts, usage=usage, text=text,
                                      tool_calls=tuple(self.tool_calls), finish_reason=self.finish_reason)
        return StreamEnd(response=response, error=error, abandoned=abandoned, usage_estimated=estimated,
                         truncated=self.truncated)


async def open_stream(chunks: AsyncIterator[ChatChunk], *, provider: str, model: str, served_by: str,
                      first_chunk_s: float, idle_s: float, price: Price | None, estimated_input_tokens: int,
                      max_output_tokens: int | None, scrub: Callable[[BaseException], object],
                      scrub_chunk: Callable[[ChatChunk], ChatChunk] | None = None) -> OpenedStream:
    """Read ``chunks`` (an adapter's ``stream_chat``) up to its first content, within ``first_chunk_s``;
    ``scrub`` takes the attempt's credentials out of an error raised later, while reading, and
    ``scrub_chunk`` out of each chunk handed out (a provider may echo a key in its finish reason).

    Content is text or tool calls, or the final chunk of an answer that has none. A stream
    that ends before it, or fails, or runs out of time, raises: the pipeline retries or
    falls back as for a unary call. The chunks read are handed out first by ``chunks()``.
    """
    head: list[ChatChunk] = []
    scope = asyncio.timeout(first_chunk_s)
    try:
        async with scope:
            async for chunk in chunks:
                head.append(chunk)
                if chunk.text or chunk.tool_calls or chunk.finish_reason is not None:
                    break
            else:
                raise MalformedResponseError("stream ended before any content", provider=provider, model=model)
    except BaseException as exc:
        await _close(chunks)
        if isinstance(exc, TimeoutError) and scope.expired():
            raise FirstChunkTimeoutError(f"stream from {served_by!r} sent no content within {first_chunk_s:g}s "
                                         "(first_chunk_timeout_s)", limit_s=first_chunk_s, provider=provider,
                                         model=model) from None
        raise
    state = _Stream(head, chunks, idle_s, price, estimated_input_tokens, max_output_tokens, scrub,
                    scrub_chunk=scrub_chunk)
    # The adapter puts its answer's rate-limit hint (its headers) on the first chunk it hands out.
    return OpenedStream(provider=provider, model=model, served_by=served_by, stream=state,
                        rate_limit=head[0].rate_limit)


async def _close(chunks: AsyncIterator[ChatChunk]) -> None:
    close = getattr(chunks, "aclose", None)
    if close is not None:
        try:
            await close()
        except Exception:  # a stream that fails while closing has nothing more to give
            log.debug("closing a stream failed", exc_info=True)


async def _finish(state: _Stream, end: StreamEnd) -> None:
    await _close(state.rest)
    for callback in state.callbacks:
        try:
            await callback(end)
        except Exception:
            # One layer's failure (a store down) must not keep the others from their end.
            log.exception("an end-of-stream callback failed")
