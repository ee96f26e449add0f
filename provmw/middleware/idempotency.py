"""``idempotency``: a call repeating an ``idempotency_key`` gets the first call's answer, once charged.

A caller that retries after a timeout of its own (or a gateway's client retrying) passes
the same ``idempotency_key``; within ``window_s`` the repeat is answered from the first
call's stored answer without a provider request or a charge, marked ``cached`` with
``cost_usd == 0`` and the first call's cost as ``saved_cost_usd``. A repeat that arrives
while the first call runs waits for it (across processes too, when ``[state]`` shares
``idempotency``). The key is scoped to the caller's tenant and user; the same key with a
different request is a ``ConfigurationError``. Failures are not remembered: a repeat of
a call that failed is a new attempt::

    [middleware.idempotency]
    window_s = 86400       # how long a key is remembered
    lock_s = 600           # how long another process waits for a first call that may have died
    max_entries = 100000   # in memory: past this many keys in a window the oldest are forgotten
    max_bytes = 268435456  # ... or past this much answer text
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from typing import Any

import attrs

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, scoped_key
from provmw.errors import ConfigurationError, InvalidDataError
from provmw.middleware._common import as_hit
from provmw.operations import any_response_from_dict
from provmw.options import number
from provmw.pipeline import Next, R
from provmw.responses import ProviderResponse
from provmw.stores.cache import CacheStore, MemoryCacheStore

__all__ = ["IdempotencyMiddleware", "IdempotencyOptions"]

log = logging.getLogger(__name__)

_POLL_FIRST_S, _POLL_MAX_S = 0.02, 0.25  # waiting for another process's first call


@attrs.frozen(kw_only=True)
class IdempotencyOptions:
    """``[middleware.idempotency]``: how long a key is remembered, how long a claim on it holds, and
    how many first answers this process keeps (the state reads the bounds, ADR 0013)."""

    window_s: float = attrs.field(default=86_400.0, validator=number(gt=0))
    lock_s: float = attrs.field(default=600.0, validator=number(gt=0))
    max_entries: int = attrs.field(default=100_000, validator=number(ge=1, integer=True))
    max_bytes: int = attrs.field(default=256 * 1024 * 1024, validator=number(ge=1, integer=True))


@attrs.frozen
class _First:
    """The first call with a key in this process: which request it was, and the task running it."""

    request: str
    task: asyncio.Task[Any]


class IdempotencyMiddleware:
    """Answer a repeated ``idempotency_key`` from the first call's answer; make concurrent repeats wait.

    The first call runs in a task of its own, so a caller that gives up waiting (its own
    timeout, a cancelled request) does not cancel a provider request that may already be
    billed: the answer is still stored, and the caller's repeat receives it.
    """

    name = "idempotency"
    priority = 805

    def __init__(self, options: IdempotencyOptions | None = None, *, store: CacheStore | None = None) -> None:
        self.options = options or IdempotencyOptions()
        o = self.options
        self.store: CacheStore = store if store is not None else MemoryCacheStore(max_entries=o.max_entries,
                                                                                   max_bytes=o.max_bytes)
        self._running: dict[str, _First] = {}

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        key = ctx.facts.idempotency_key
        if key is None:
            return await next(config)
        slot, request = _slot(ctx, key), ctx.facts.shared_cache_key or ""
        while (first := self._running.get(slot)) is not None:
            _same_request(first.request, request, key)
            try:
                return as_hit(await asyncio.shield(first.task))  # type: ignore[no-any-return]
            except asyncio.CancelledError:
                if not first.task.cancelled():
                    raise  # we were cancelled; a cancelled first call lets us go again
        task = asyncio.get_running_loop().create_task(self._first_or_replay(slot, request, key, config, next))
        self._running[slot] = started = _First(request, task)
        task.add_done_callback(lambda _: self._forget(slot, started))
        return await asyncio.shield(task)

    async def aclose(self) -> None:
        """Stop first calls still running with the manager (their answers can no longer be kept)."""
        for first in list(self._running.values()):
            first.task.cancel()

    def _forget(self, slot: str, first: _First) -> None:
        if self._running.get(slot) is first:
            del self._running[slot]
        if not first.task.cancelled():
            first.task.exception()  # retrieved: no warning when its caller stopped waiting

    async def _first_or_replay(self, slot: str, request: str, key: str, config: ProviderConfig, next: Next[R]) -> R:
        claim = await self._claim(slot, request, key)
        if isinstance(claim, ProviderResponse):
            return as_hit(claim)  # type: ignore[return-value]
        try:
            response = await next(config)
            entry = {"request": request, "response": response.to_dict()}
            await self.store.set(slot, json.dumps(entry, separators=(",", ":")), self.options.window_s)
        finally:
            if claim:
                await self.store.unclaim(slot, claim)
        return response

    async def _claim(self, slot: str, request: str, key: str) -> str | ProviderResponse:
        """The store's claim on ``slot``, or the answer a first call (maybe in another process) stored."""
        delay = _POLL_FIRST_S
        while True:
            stored = await self._stored(slot, request, key)
            if stored is not None:
                return stored
            token = await self.store.claim(slot, self.options.lock_s)
            if token is not None:
                return token
            await asyncio.sleep(delay)
            delay = min(2 * delay, _POLL_MAX_S)

    async def _stored(self, slot: str, request: str, key: str) -> ProviderResponse | None:
        text = await self.store.get(slot)
        if text is None:
            return None
        try:
            entry = json.loads(text)
            first, response = entry["request"], any_response_from_dict(entry["response"])
        except (ValueError, LookupError, TypeError, InvalidDataError) as exc:
            log.warning("idempotency: dropping an unreadable entry %s (%s)", slot[:32], exc)
            await self.store.delete(slot)
            return None
        _same_request(first, request, key)
        return response


def _slot(ctx: ProviderCallContext, key: str) -> str:
    digest = hashlib.sha256(key.encode()).hexdigest()
    return "idempotency:" + scoped_key(digest, ctx.facts.tenant, ctx.facts.user)


def _same_request(first: str, this: str, key: str) -> None:
    if first != this:
        raise ConfigurationError(
            f"idempotency_key {key!r} was already used for a different request; a new request needs a new key")
