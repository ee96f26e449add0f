"""``cache``: answer repeated requests from a store, scoped to who asked, one upstream call at a time.

The key is the call's ``ctx.facts.cache_key`` (the canonical request bound to the caller's
tenant and user), so two tenants never share an entry; a namespace listed in
``shared_namespaces`` uses the unscoped ``shared_cache_key`` on purpose. Per-call controls:
``no_cache`` (do not read), ``no_store`` (do not write), ``ttl_s``, ``namespace``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
from collections.abc import Sequence
from typing import Any

import attrs

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.errors import ConfigurationError, InvalidDataError
from provmw.middleware._common import Clock, as_hit, monotonic, seconds_control
from provmw.operations import OPERATIONS, any_response_from_dict
from provmw.options import number
from provmw.pipeline import Next, R
from provmw.responses import (
    CompletionResponse,
    EmbeddingResponse,
    ProviderResponse,
    VisionResponse,
)
from provmw.stores.cache import CacheStore, MemoryCacheStore

__all__ = ["CacheMiddleware", "CacheOptions"]

log = logging.getLogger(__name__)

_OPERATIONS = [op.value for op in ProviderOperation]
_COMPLETE = frozenset({"stop", "tool_calls"})  # finish reasons of a whole answer
_DECODED_MAX = 1024
_POLL_FIRST_S, _POLL_MAX_S = 0.02, 0.25  # waiting for another process's entry


def _operations(value: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise ConfigurationError(f"operations must be a list, got the string {value!r}")
    for name in value:
        if name not in _OPERATIONS:
            raise ConfigurationError(f"operations: {name!r} is not one of {', '.join(_OPERATIONS)}")
    return tuple(value)


def _names(value: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise ConfigurationError(f"shared_namespaces must be a list, got the string {value!r}")
    return tuple(value)


@attrs.frozen
class CacheOptions:
    """``[middleware.cache]``: which operations, how long, how much, which namespaces are shared."""

    operations: tuple[str, ...] = attrs.field(default=("embedding",), converter=_operations)
    ttl_s: float = attrs.field(default=3600.0, validator=number(gt=0))
    max_entries: int = attrs.field(default=10_000, validator=number(ge=1, integer=True))
    max_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=number(ge=1, integer=True))
    shared_namespaces: tuple[str, ...] = attrs.field(default=(), converter=_names)
    lock_s: float = attrs.field(default=30.0, validator=number(gt=0))


class CacheMiddleware:
    """Serve hits marked ``cached=True``; store only whole answers; coalesce identical misses.

    A hit (a coalesced waiter's answer too) costs nothing: its ``usage.cost_usd`` is 0 and
    ``usage.saved_cost_usd`` is what the answer cost when it was made, so an application
    that sums its responses' costs gets what the provider billed.

    Chat-like operations are cached only when listed in ``operations`` and deterministic
    (temperature 0 or a seed). Errors, answers cut by length or a content filter, and
    anything unreadable in the store are never served or kept. Concurrent identical misses
    make one upstream call: its answer (marked cached) or its error reaches every waiter.
    Across processes sharing a store, the process holding the store's claim on the key
    (for at most ``lock_s``) calls upstream; the others poll for its entry.
    """

    name = "cache"
    priority = 800
    controls = frozenset({"no_cache", "no_store", "ttl_s", "namespace"})

    def __init__(self, options: CacheOptions | None = None, *, store: CacheStore | None = None,
                 timer: Clock = monotonic) -> None:
        self.options = o = options or CacheOptions()
        self.store: CacheStore = store if store is not None else MemoryCacheStore(
            max_entries=o.max_entries, max_bytes=o.max_bytes, timer=timer)
        self._operations = frozenset(ProviderOperation(name) for name in o.operations)
        # A store that grants every claim (one process's memory) is not asked: the misses of one
        # process are coalesced here already, and two awaits per miss are saved.
        self._claims = not getattr(self.store, "grants_every_claim", False)
        # A store of this process's memory keeps answers as they are: no JSON either way (ADR 0031).
        self._keeps = getattr(self.store, "keeps_answers", False)
        self._in_flight: dict[str, asyncio.Future[Any]] = {}
        # Decoding a stored answer costs more than the rest of a hit; remember the last few
        # decodings, each valid only while the store returns the very same text.
        self._decoded: collections.OrderedDict[str, tuple[str, ProviderResponse]] = collections.OrderedDict()

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        key = self._key(ctx)
        if key is None:
            return await next(config)
        controls = ctx.facts.controls
        if controls.get("no_cache"):
            return await self._fill(key, ctx, config, next, controls)
        while True:
            # The memory store answers at once, with an answer it kept or text another writer left.
            found = self.store.kept(key) if self._keeps else await self.store.get(key)  # type: ignore[attr-defined]
            hit = found.hit() if type(found) is _Kept else \
                None if found is None else await self._decode(key, found, ctx.operation)
            if hit is not None:
                return hit  # type: ignore[return-value]
            leader = self._in_flight.get(key)
            if leader is None:
                return await self._fill(key, ctx, config, next, controls)
            try:
                response = await asyncio.shield(leader)
            except asyncio.CancelledError:
                if leader.cancelled():  # the leader was cancelled, not us: try again
                    continue
                raise
            return as_hit(response)  # type: ignore[no-any-return]

    def _key(self, ctx: ProviderCallContext) -> str | None:
        facts = ctx.facts
        if ctx.operation not in self._operations or not (facts.deterministic or ctx.operation in _GENERATED) \
                or facts.stream:
            return None
        namespace = facts.controls.get("namespace", "default")
        if not isinstance(namespace, str) or not namespace:
            raise ConfigurationError(f"controls['namespace'] must be a non-empty string, got {namespace!r}")
        key = facts.shared_cache_key if namespace in self.options.shared_namespaces else facts.cache_key
        return None if key is None else f"{namespace}:{key}"

    async def _fill(self, key: str, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R],
                    controls: Any) -> R:
        ttl_s = seconds_control(ctx, "ttl_s") or self.options.ttl_s
        leader: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._in_flight.setdefault(key, leader)
        claim = ""
        try:
            if self._claims and not controls.get("no_cache"):
                claimed = await self._claim(key, ctx.operation)
                if not isinstance(claimed, str):  # another process filled it while we waited
                    leader.set_result(claimed)
                    self._done(key, leader)
                    return claimed  # type: ignore[return-value]
                claim = claimed
            response = await next(config)
        except BaseException as exc:
            self._done(key, leader)
            if claim:
                await self.store.unclaim(key, claim)
            if isinstance(exc, asyncio.CancelledError):
                leader.cancel()  # waiters go again rather than fail with our cancellation
            else:
                leader.set_exception(exc)
                leader.exception()  # retrieved: no "never retrieved" warning when nobody waited
            raise
        leader.set_result(response)
        try:
            if not controls.get("no_store") and _whole(response):
                await self._write(key, response, ttl_s)
        finally:  # stay joinable until the entry is written, so no newcomer goes upstream
            self._done(key, leader)
            if claim:
                await self.store.unclaim(key, claim)
        return response

    async def _claim(self, key: str, operation: ProviderOperation) -> str | ProviderResponse:
        """The store's claim on ``key``, or the entry its holder wrote while we polled."""
        delay = _POLL_FIRST_S
        while True:
            token = await self.store.claim(key, self.options.lock_s)
            if token is not None:
                return token
            await asyncio.sleep(delay)
            delay = min(2 * delay, _POLL_MAX_S)
            hit = await self._read(key, operation)
            if hit is not None:
                return hit

    def _done(self, key: str, leader: asyncio.Future[Any]) -> None:
        if self._in_flight.get(key) is leader:
            del self._in_flight[key]

    async def _read(self, key: str, operation: ProviderOperation) -> ProviderResponse | None:
        return await self._decode(key, await self.store.get(key), operation)

    async def _decode(self, key: str, text: object, operation: ProviderOperation) -> ProviderResponse | None:
        if not isinstance(text, str):
            return None
        known = self._decoded.get(key)
        if known is not None and known[0] == text:
            self._decoded.move_to_end(key)
            # A miss keeps its answer as fetched: it becomes a hit (two evolves) when first read.
            return known[1] if known[1].cached else self._remember(key, text, known[1])
        try:
            response = any_response_from_dict(json.loads(text))
            if _TYPES.get(operation, CompletionResponse.TYPE) != response.TYPE:
                raise InvalidDataError(f"a {type(response).__name__} under a {operation.value} key")
        except (ValueError, InvalidDataError) as exc:  # JSONDecodeError is a ValueError
            log.warning("cache: dropping an unreadable entry %s (%s)", key[:24], exc)
            await self.store.delete(key)
            return None
        return self._remember(key, text, response)

    async def _write(self, key: str, response: ProviderResponse, ttl_s: float) -> None:
        if self._keeps:
            self.store.keep(key, _Kept(response), _answer_bytes(response), ttl_s)  # type: ignore[attr-defined]
            return
        text = json.dumps(response.to_dict(), separators=(",", ":"))
        await self.store.set(key, text, ttl_s)
        self._keep(key, text, response)

    def _remember(self, key: str, text: str, response: ProviderResponse) -> ProviderResponse:
        hit = as_hit(response)
        self._keep(key, text, hit)
        return hit

    def _keep(self, key: str, text: str, response: ProviderResponse) -> None:
        self._decoded[key] = (text, response)
        self._decoded.move_to_end(key)
        if len(self._decoded) > _DECODED_MAX:
            self._decoded.popitem(last=False)


class _Kept:
    """An answer kept in this process's memory store; its first reader makes it a hit, once."""

    __slots__ = ("answer",)

    def __init__(self, answer: ProviderResponse) -> None:
        self.answer = answer

    def hit(self) -> ProviderResponse:
        if not self.answer.cached:  # a miss keeps its answer as fetched: a hit when first read
            self.answer = as_hit(self.answer)
        return self.answer


# Counted from above: the response and its usage as objects, a string's or tuple's header, a
# float (24 bytes) and its place in a tuple (8).
_ANSWER_OVERHEAD, _OBJECT_OVERHEAD, _NUMBER_BYTES = 1024, 80, 32


def _answer_bytes(response: ProviderResponse) -> int:
    """What an answer holds in memory, counted from above: each string at 4 bytes a character
    unless ASCII, each vector number at 32, and the objects that hold them."""
    if isinstance(response, EmbeddingResponse):
        vectors = response.vectors
        return _ANSWER_OVERHEAD + _NUMBER_BYTES * sum(map(len, vectors)) + _OBJECT_OVERHEAD * len(vectors)
    if not isinstance(response, CompletionResponse):  # an operation beyond chat's: its JSON, as text
        return _ANSWER_OVERHEAD + 4 * len(json.dumps(response.to_dict()))
    strings = [response.text, *(s for c in response.tool_calls for s in (c.id, c.name, c.arguments))]
    size = sum((len(t) if t.isascii() else 4 * len(t)) + _OBJECT_OVERHEAD for t in strings)
    # The parsed JSON of a structured answer holds about what its text does, and its objects more.
    return _ANSWER_OVERHEAD + (4 * size if response.parsed is not None else size)


# The type of answer each operation's key holds (a completion's, unless named here).
_TYPES: dict[ProviderOperation, str] = {
    ProviderOperation.EMBEDDING: EmbeddingResponse.TYPE,
    ProviderOperation.VISION: VisionResponse.TYPE,
    **{operation: spec.response_type for operation, spec in OPERATIONS.items()},
}
# Generated media are cached where listed, whatever the request: listing them is the opt-in (ADR 0054).
_GENERATED = frozenset(operation for operation, spec in OPERATIONS.items() if spec.generated)


def _whole(response: ProviderResponse) -> bool:
    """Only complete answers are kept: not cut by length, not filtered, not empty."""
    if isinstance(response, EmbeddingResponse):
        return bool(response.vectors)
    if isinstance(response, CompletionResponse) or hasattr(response, "finish_reason"):
        return getattr(response, "finish_reason", None) in _COMPLETE
    return True  # an operation beyond chat's adapter refuses an empty or partial answer as malformed
