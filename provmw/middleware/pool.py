"""``pool``: choose a deployment of a pool for each attempt (ADR 0051).

It sits inside ``retry`` and outside ``circuit_breaker`` (priority 450). Inside retry, so each
retry is a new choice that avoids the deployments already failed in the call: a retryable
failure moves to another deployment before the fallback chain moves to another model, and the
retry layer's bound is the bound on attempts over the whole pool. Outside the breaker, so each
deployment has its own breaker; an open one answers before anything is sent, and the pool
cools that deployment down and chooses again at once. Budgets, fallback and rate limits above
it see the pool by its name; the breaker, the ledger and the adapter below it see the
deployment (``response.served_by`` names it). An answer whose provider says (``rate_limit``,
from its headers) that no request is left, or fewer tokens than the call's estimate, cools its
deployment down until the provider's reset, so no call is sent there to be answered 429.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import CircuitOpenError, ConfigurationError, PoolUnavailableError, RateLimitError
from provmw.middleware._common import Clock, monotonic
from provmw.middleware._pool_choice import choose, headroom
from provmw.pipeline import Next, R
from provmw.pools import POOL_PROVIDER, Pool
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest
from provmw.responses import RateLimitHint
from provmw.stores.pools import MemoryPoolState, PoolState, PoolView
from provmw.streams import OpenedStream, StreamEnd

__all__ = ["PoolMiddleware"]

log = logging.getLogger(__name__)

_PREFIX_CHARS = 4096  # the prompt prefix affinity keys by: about what providers cache first
_MIN_WAIT_S = 1.0  # a refusal's retry hint when nothing says sooner


class PoolMiddleware:
    """Send each attempt on a pool to one of its deployments: filter, then the pool's strategy.

    Per-call controls: ``deployment`` pins one (a member's name), ``exclude_deployments``
    leaves some out, ``session`` keys ``affinity``.
    """

    name = "pool"
    priority = 450
    controls = frozenset({"deployment", "exclude_deployments", "session"})

    def __init__(self, *, pools: Mapping[str, Pool], configurations: Mapping[str, ProviderConfig],
                 state: PoolState | None = None, wall_clock: Clock = time.time, clock: Clock = monotonic,
                 rng: random.Random | None = None) -> None:
        self._pools = pools
        self._configurations = configurations
        self.state: PoolState = state if state is not None else MemoryPoolState()
        self._wall, self._clock = wall_clock, clock
        self._rng = rng if rng is not None else random.Random()

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        pool = self._pools.get(config.identifier) if config.provider == POOL_PROVIDER else None
        if pool is None:
            return await next(config)
        key = affinity_key(pool, ctx) if pool.strategy == "affinity" else None
        tokens = ctx.facts.estimated_input_tokens + (ctx.facts.max_output_tokens or 0)
        tried: set[str] = set()
        limited: RateLimitError | None = None  # a 429 from a deployment: raised if no other is left
        while True:
            now = self._wall()
            view = await self.state.read(pool.name, pool.members, key, now)
            try:
                member = self._chosen(pool, ctx, view, tried, tokens, now)
            except PoolUnavailableError:
                if limited is not None:
                    raise limited from None
                raise
            tried.add(member)
            deployment = self._configurations[member]
            await self.state.started(pool.name, member, key=key, tokens=tokens, now=now, key_ttl_s=pool.affinity_ttl_s)
            started = self._clock()
            try:
                response = await next(deployment)
            except CircuitOpenError as exc:  # refused before sending: cool it down, choose again now
                await self._ended(pool, member, None, self._wall() + exc.retry_after_s)
                continue
            except RateLimitError as exc:  # that deployment is full: cool it down, try another now
                await self._ended(pool, member, None, self._wall() + (exc.retry_after_s or _MIN_WAIT_S))
                limited = exc
                continue
            except BaseException:
                await self._ended(pool, member, None, None)
                raise
            latency_s = self._clock() - started
            wait_s = exhausted_for(response.rate_limit, tokens)
            cooldown_until = None if wait_s is None else self._wall() + wait_s
            if isinstance(response, OpenedStream) and cooldown_until is None:
                # in flight until the stream ends; its latency: to open
                response.on_end(functools.partial(self._stream_ended, pool, member, latency_s))
                return response
            # A stream whose provider has nothing left ends its count now: its deployment takes no
            # call until the reset, and the state has no way to cool down a call still in flight.
            await self._ended(pool, member, latency_s, cooldown_until)
            return response

    async def _stream_ended(self, pool: Pool, member: str, latency_s: float, end: StreamEnd) -> None:
        await self._ended(pool, member, latency_s, None)

    async def _ended(self, pool: Pool, member: str, latency_s: float | None, cooldown_until: float | None) -> None:
        await self.state.ended(pool.name, member, now=self._wall(), latency_s=latency_s, cooldown_until=cooldown_until)

    def _chosen(self, pool: Pool, ctx: ProviderCallContext, view: PoolView, tried: set[str], tokens: int,
                now: float) -> str:
        controls = ctx.facts.controls
        pinned = controls.get("deployment")
        if pinned is not None:
            if pinned not in pool.members:
                raise ConfigurationError(f"controls['deployment']: {pinned!r} is not a deployment of pool "
                                         f"{pool.name!r}; its deployments: {', '.join(pool.members)}")
            if pinned in tried:  # its breaker is open, or it answered 429: the call pinned it, nothing else
                wait = max(view.loads[pinned].cooldown_until - now, 0.0)
                raise PoolUnavailableError(pool.name, wait, f"{pinned}: pinned, cooling down")
            return str(pinned)
        candidates, reasons = self._candidates(pool, ctx, view, tried, tokens, now)
        if not candidates:
            free_at = [view.loads[m].cooldown_until for m in pool.members if view.loads[m].cooldown_until > now]
            wait = min(free_at) - now if free_at else _MIN_WAIT_S
            raise PoolUnavailableError(pool.name, max(wait, 0.0), "; ".join(reasons))
        return choose(pool, candidates, view, self._rng)

    def _candidates(self, pool: Pool, ctx: ProviderCallContext, view: PoolView, tried: set[str], tokens: int,
                    now: float) -> tuple[list[str], list[str]]:
        """The members that may take the call, and why each other one may not."""
        controls = ctx.facts.controls
        excluded = _names(controls["exclude_deployments"]) if "exclude_deployments" in controls else frozenset()
        failed = {a.config_id for a in ctx.attempts.recorded if a.error_type is not None} | tried
        unmet, limited, configurations = ctx.facts.unmet, bool(pool.limits), self._configurations
        able, reasons = [], []
        for member in pool.members:
            load = view.loads[member]
            why = "excluded" if member in excluded else \
                "inactive" if not configurations[member].active else \
                f"lacks {', '.join(unmet[member])}" if member in unmet else \
                "cooling down" if load.cooldown_until > now else \
                "at its limit in the last minute" if limited and headroom(pool, member, load, tokens) is None \
                else None
            if why is None:
                able.append(member)
            else:
                reasons.append(f"{member}: {why}")
        fresh = [m for m in able if m not in failed]
        if not fresh and able:
            reasons += [f"{m}: failed in this call" for m in able]
        return (fresh or ([] if tried else able)), reasons


def exhausted_for(hint: RateLimitHint | None, tokens: int) -> float | None:
    """The seconds a deployment is left alone after an answer saying ``hint``: until the reset of
    its requests when none is left, of its tokens when fewer than ``tokens`` (a call's estimate) are
    left (a second when the reset is not said); None while it has room."""
    if hint is None:
        return None
    waits = []
    if hint.remaining_requests == 0:
        waits.append(_MIN_WAIT_S if hint.requests_reset_s is None else hint.requests_reset_s)
    if hint.remaining_tokens is not None and hint.remaining_tokens < tokens:
        waits.append(_MIN_WAIT_S if hint.tokens_reset_s is None else hint.tokens_reset_s)
    return max(waits) if waits else None


def affinity_key(pool: Pool, ctx: ProviderCallContext) -> str | None:
    """What keeps the call with a deployment: the first of the pool's ``affinity`` the call has."""
    for kind in pool.affinity:
        if kind == "session":
            session = ctx.facts.controls.get("session")
            if isinstance(session, str) and session:
                return f"session:{session}"
        elif kind == "user" and ctx.facts.user:
            return f"user:{ctx.facts.user}"
        elif kind == "prefix" and (prefix := _prefix(ctx)):
            return "prefix:" + hashlib.sha256(prefix.encode()).hexdigest()[:32]
    return None


def _prefix(ctx: ProviderCallContext) -> str:
    request = ctx.request
    if isinstance(request, ChatRequest):
        text = "".join(_texts(request))
    elif isinstance(request, CompletionRequest):
        text = request.prompt
    elif isinstance(request, EmbeddingRequest):
        text = request.inputs[0] if request.inputs else ""
    else:
        return ""
    return text[:_PREFIX_CHARS]


def _texts(request: ChatRequest) -> Iterator[str]:
    size = 0
    for message in request.messages:
        yield message.role
        yield message.text
        size += len(message.text)
        if size >= _PREFIX_CHARS:
            return


def _names(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset((value,))
    if isinstance(value, Sequence | frozenset | set) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    raise ConfigurationError(f"controls['exclude_deployments'] must be a list of deployment names, got {value!r}")
