"""``budget``: reserve before the call, settle with the real cost after, refuse what does not fit.

Limits are declared per scope (``user``, ``tenant``, ``configuration``, ``global``) and
period (``day``, ``week``, ``month`` in the configured time zone, or ``total``)::

    [middleware.budget]
    timezone = "America/Los_Angeles"

    [[middleware.budget.limits]]
    scope = "user"            # each user has a bucket of their own ...
    match = "*"               # ... or name one user
    period = "day"
    max_cost_usd = 5.0
    max_requests = 1000
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from provmw._base.periods import PERIODS, Period, Window, window
from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation, metering
from provmw.errors import BudgetExceededError, ConfigurationError
from provmw.middleware._budget_need import need, refusal_error
from provmw.middleware._common import Clock
from provmw.options import number, one_of, options_from
from provmw.pipeline import Next, R
from provmw.pricing import PriceTable
from provmw.responses import Billed, ProviderResponse, Usage
from provmw.stores.budgets import (
    DIMENSIONS,
    Amounts,
    BucketId,
    BudgetStore,
    Charge,
    Limits,
    MemoryBudgetStore,
    Refusal,
    one_per_bucket,
)
from provmw.streams import OpenedStream, StreamEnd

__all__ = ["BudgetLimit", "BudgetMiddleware", "BudgetOptions"]

# ``key``, ``team`` and ``organisation`` are a gateway call's (``ctx.facts.principal``; ADR 0055); so is
# ``user`` when the call has a principal with a user: then its bucket is ORGANISATION/USER.
Scope = Literal["user", "tenant", "configuration", "global", "key", "team", "organisation"]
SCOPES: tuple[str, ...] = get_args(Scope)
ANONYMOUS = "(none)"
_BUCKETS_KEPT = 4096

log = logging.getLogger(__name__)


@attrs.frozen(kw_only=True)
class BudgetLimit:
    """One ``[[middleware.budget.limits]]`` entry: whose bucket, which period, how much."""

    scope: Scope = attrs.field(validator=one_of(SCOPES))
    period: Period = attrs.field(default="month", validator=one_of(PERIODS))
    match: str = "*"
    max_cost_usd: float | None = attrs.field(default=None, validator=number(ge=0, optional=True))
    max_tokens: int | None = attrs.field(default=None, validator=number(ge=0, integer=True, optional=True))
    max_requests: int | None = attrs.field(default=None, validator=number(ge=0, integer=True, optional=True))

    def __attrs_post_init__(self) -> None:
        if self.max_cost_usd is None and self.max_tokens is None and self.max_requests is None:
            raise ConfigurationError(f"a {self.scope} limit needs max_cost_usd, max_tokens or max_requests")

    @property
    def limits(self) -> Limits:
        cost = None if self.max_cost_usd is None else round(self.max_cost_usd * 1e6)
        return Limits(cost, self.max_tokens, self.max_requests)

    def subject(self, ctx: ProviderCallContext, config: ProviderConfig) -> str | None:
        """The bucket's subject for this call, or None when the limit does not apply to it."""
        if self.scope == "global":
            subject = "*"
        elif self.scope == "configuration":
            subject = config.identifier
        elif self.scope == "user":  # a gateway user is named within its organisation (Principal.subject)
            principal = ctx.facts.principal
            subject = (principal is not None and principal.subject("user")) or ctx.facts.user or ANONYMOUS
        elif self.scope == "tenant":
            subject = ctx.facts.tenant or ANONYMOUS
        else:  # a principal's: a call without one, or whose principal has no such name, is not in it
            principal = ctx.facts.principal
            found = None if principal is None else principal.subject(self.scope)
            if found is None:
                return None
            subject = found
        return subject if self.match in ("*", subject) else None


def _limits(value: Sequence[BudgetLimit | Mapping[str, Any]]) -> tuple[BudgetLimit, ...]:
    if not isinstance(value, list | tuple):
        raise ConfigurationError(f"limits must be a list of tables ([[middleware.budget.limits]]), got {value!r}")
    return tuple(item if isinstance(item, BudgetLimit) else options_from(BudgetLimit, item, f"limits[{i}]")
                 for i, item in enumerate(value))


def _zone(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    try:
        ZoneInfo(str(value))
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(f"timezone: unknown time zone {value!r} (an IANA name such as 'Europe/Paris')")\
            from None


@attrs.frozen(kw_only=True)
class BudgetOptions:
    """``[middleware.budget]``: the limits and how to reserve; ``store``, ``path``, ``busy_timeout_s``,
    ``synchronous``, ``calls_per_block`` and ``failure_policy`` say where spend is kept and what an
    outage means (the manager's state reads them, ADR 0013)."""

    limits: tuple[BudgetLimit, ...] = attrs.field(default=(), converter=_limits)
    mode: Literal["strict", "estimate"] = attrs.field(default="strict", validator=one_of(("strict", "estimate")))
    timezone: str = attrs.field(default="UTC", validator=_zone)
    lease_s: float = attrs.field(default=60.0, validator=number(gt=0))
    store: Literal["sqlite", "memory"] = attrs.field(default="sqlite", validator=one_of(("sqlite", "memory")))
    path: str = "provmw.sqlite3"
    busy_timeout_s: float = attrs.field(default=5.0, validator=number(ge=0))
    # "normal": a committed step survives kill -9 without an fsync; "full" waits for the disk (ADR 0028).
    synchronous: Literal["normal", "full"] = attrs.field(default="normal", validator=one_of(("normal", "full")))
    # At "normal", one transaction reserves room for this many calls of a process (ADR 0035); 1: one each.
    calls_per_block: int = attrs.field(default=16, validator=number(ge=1, integer=True))
    failure_policy: Literal["fail_closed", "fail_open"] = attrs.field(
        default="fail_closed", validator=one_of(("fail_closed", "fail_open")))


class BudgetMiddleware:
    """Reserve against every bucket a call touches, all or nothing, before it goes out.

    In ``strict`` mode the reservation is a true worst case (``planned_cost_usd``: the most
    expensive configuration in the fallback chain, at an input bound no tokenizer can exceed,
    every input token at the highest rate the call can incur, plus ``max_tokens`` or the
    model's ceiling, ADR 0015), so concurrent calls can never push a bucket past its limit;
    a call whose worst case cannot be known is refused with ``ConfigurationError``.
    ``estimate`` reserves the cheap estimate and never refuses for want of a price. After the call the real amounts are
    settled (the response's priced usage, one request); on any failure the reservation is
    released. Leases expire if this process dies, and are renewed while a call runs.
    Cache hits never reach this layer, so they are never charged. What a store that cannot
    reserve means is the outage rule's (``provmw.stores.outage``): by default
    ``BudgetUnavailableError`` before anything is sent.
    """

    name = "budget"
    priority = 700

    def __init__(self, options: BudgetOptions | None = None, *, store: BudgetStore | None = None,
                 wall_clock: Clock = time.time) -> None:
        self.options = options or BudgetOptions()
        self.store: BudgetStore = store if store is not None else MemoryBudgetStore()
        self._zone = ZoneInfo(self.options.timezone)
        self._clock = wall_clock
        self._windows: dict[str, Window] = {}  # the current window of each period, until it ends
        self._limits = {limit: limit.limits for limit in self.options.limits}
        self._buckets: dict[tuple[str, str, str, str], BucketId] = {}  # the buckets of recent calls, made once
        self._renewals = _Renewals(self.store, self.options.lease_s, wall_clock)
        self._prices: PriceTable | None = None  # read only to explain a refusal, so loaded on the first

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        if not self.options.limits and (ctx.facts.principal is None or not ctx.facts.principal.budgets):
            return await next(config)
        now = self._clock()
        charges = self.charges(ctx, config, now)
        if not charges:
            return await next(config)
        bill = _Bill(self, charges, ctx, config)
        refusal = await bill.reserve(now)
        if refusal is not None:
            await asyncio.sleep(0)  # a caller retrying at once must still let the loop run (ADR 0045)
            raise self.refused(ctx, config, refusal, charges[0].amount)
        try:
            with metering(bill):
                response = await next(config)
        except BaseException:
            await bill.close(None)
            raise
        await bill.close(response)
        return response

    def charges(self, ctx: ProviderCallContext, config: ProviderConfig, now: float) -> list[Charge]:
        """What the call reserves against each bucket it touches (the same worst case in each)."""
        principal = ctx.facts.principal
        limits = self.options.limits if principal is None or not principal.budgets else \
            (*self.options.limits, *principal.budgets)
        touched = [(limit, subject) for limit in limits if (subject := limit.subject(ctx, config)) is not None]
        if not touched:
            return []
        amount = self.worst_case(ctx, config, [limit for limit, _ in touched])
        return list(one_per_bucket([Charge(self._bucket(limit, subject, now), self._limits.get(limit) or limit.limits,
                                           amount) for limit, subject in touched]))

    def refused(self, ctx: ProviderCallContext, config: ProviderConfig, refusal: Refusal, amount: Amounts, *,
                further: bool = False) -> BudgetExceededError:
        """The error for ``refusal``: what the call (or a further attempt) needed, who set it, and why."""
        if self._prices is None:
            self._prices = PriceTable()  # the bundled table, as the manager's; a configuration's own price first
        why = need(ctx, config, amount, refusal.dimension, strict=self.options.mode == "strict", prices=self._prices)
        return refusal_error(refusal, why, further=further)

    def _bucket(self, limit: BudgetLimit, subject: str, now: float) -> BucketId:
        span = self._window(limit.period, now)
        key = (limit.scope, subject, limit.period, span.label)
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= _BUCKETS_KEPT:
                self._buckets.clear()
            bucket = self._buckets[key] = BucketId(*key, span.resets_at)
        return bucket

    def _window(self, period: Period, now: float) -> Window:
        span = self._windows.get(period)
        if span is None or not span.holds(now):
            span = self._windows[period] = window(period, self._zone, now)
        return span

    def worst_case(self, ctx: ProviderCallContext, config: ProviderConfig,
                   limits: Sequence[BudgetLimit] | None = None) -> Amounts:
        """What one attempt of ``ctx`` on ``config`` may cost, as reserved (``limits``: those it touches)."""
        if limits is None:
            limits = self.options.limits
        strict = self.options.mode == "strict"
        facts = ctx.facts
        # Strict reserves the true bound (ADR 0015); estimate mode the estimate, else the bound.
        planned = facts.planned_cost_usd if strict or facts.estimated_cost_usd is None else facts.estimated_cost_usd
        if strict and facts.unknown_worst_case is not None and any(
                limit.max_cost_usd is not None or limit.max_tokens is not None for limit in limits):
            raise ConfigurationError(f"budget: the worst case of a call on {config.identifier!r} cannot be known "
                                     f"before it is sent: {facts.unknown_worst_case}")
        if planned is None and strict and any(limit.max_cost_usd is not None for limit in limits):
            raise ConfigurationError(
                f"budget: the worst-case cost of a call on {config.identifier!r} is unknown (a configuration in "
                "its chain has no price, or none for a unit it bills, or the call sets no max_tokens and the "
                "model's ceiling is unknown); strict cost limits need it: add [configurations.<name>.price] "
                "(with max_output_tokens, or its units) or options.max_tokens")
        output = facts.max_output_tokens
        if output is None and ctx.operation is not ProviderOperation.EMBEDDING:
            if strict and any(limit.max_tokens is not None for limit in limits):
                raise ConfigurationError(
                    f"budget: a call on {config.identifier!r} sets no max_tokens; strict token limits need it")
            output = 0
        input_tokens = max(facts.max_input_tokens, facts.estimated_input_tokens) if strict \
            else facts.estimated_input_tokens
        tokens = input_tokens + (output or 0)
        return Amounts(math.ceil((planned or 0.0) * 1e6), tokens, 1)


def _micro_usd(cost_usd: float | None) -> int:
    """Micro-dollars rounded up, as reservations are, so that no call is free; a negative cost
    (an adapter that let one through) counts as nothing, never as a credit."""
    if cost_usd is None or cost_usd <= 0:
        return 0
    return math.ceil(round(cost_usd * 1e6, 3))  # the round keeps 3.0000000000000004 at 3


class _Bill:
    """One call's reservations and what its attempts spent (ADR 0040).

    The call's reservation covers its first attempt; each further attempt (a retry, a fallback,
    a hedge, a repair turn) reserves as much again before it is sent, or is refused. An attempt
    never sent costs nothing; one answered costs its priced usage (in strict mode at most its
    reservation, the excess logged); one sent whose usage is unknown (a timeout, a cancelled
    caller, a body that does not parse) costs its reservation. All of it is settled at once when
    the call is over and its streams have ended.
    """

    def __init__(self, layer: BudgetMiddleware, charges: Sequence[Charge], ctx: ProviderCallContext,
                 config: ProviderConfig) -> None:
        self._store, self._renewals, self._clock = layer.store, layer._renewals, layer._clock
        self._layer, self._ctx, self._config = layer, ctx, config  # to explain a refused further attempt
        self._lease_s = layer.options.lease_s
        self._charges = charges
        self._each = charges[0].amount  # one attempt's worth: the same in every bucket
        strict = layer.options.mode == "strict"
        # Strict reservations are true bounds in the dimensions a limit holds (else the call was refused).
        self._capped = (strict and any(c.limits.cost_micro_usd is not None for c in charges),
                        strict and any(c.limits.tokens is not None for c in charges))
        self._ids: list[str] = []
        self._started = self._open = 0
        self._spent = Amounts()
        self._billed = self._closed = self._settled = False

    async def reserve(self, now: float, sent: ProviderCallContext | None = None) -> Refusal | None:
        charges = self._charges
        if self._ids:  # a further attempt of a call already counted as one request
            amount = attrs.evolve(self._further(sent), requests=0)
            charges = [attrs.evolve(c, amount=amount) for c in charges]
        reservation = os.urandom(16).hex()
        self._ids.append(reservation)  # before the await: one a cancellation cut short is settled too
        refusal = await self._store.reserve(reservation, charges, now=now, lease_s=self._lease_s)
        if refusal is None:
            self._renewals.start(reservation)
        else:
            self._ids.remove(reservation)
        return refusal

    def _further(self, sent: ProviderCallContext | None) -> Amounts:
        """What a further attempt reserves: as much as the first, or more when a layer below rewrote the
        request into a larger one (a repair turn); the largest is what any attempt may then cost."""
        if sent is None or sent.facts is self._ctx.facts:
            return self._each
        layer, config = self._layer, self._config
        touched = [limit for limit in layer.options.limits if limit.subject(self._ctx, config) is not None]
        larger = layer.worst_case(sent, config, touched)
        each = self._each
        self._each = each = Amounts(max(each.cost_micro_usd, larger.cost_micro_usd), max(each.tokens, larger.tokens),
                                    each.requests)
        return each

    async def sending(self, config: ProviderConfig, ctx: ProviderCallContext | None = None) -> None:
        self._started += 1
        if self._started > len(self._ids):
            refusal = await self.reserve(self._clock(), ctx)
            if refusal is not None:
                self._started -= 1
                raise self._layer.refused(self._ctx, self._config, refusal, self._each, further=True)
        self._open += 1

    async def ended(self, config: ProviderConfig | None, billed: Billed, usage: Usage | None) -> None:
        self._open -= 1
        if billed != "no":
            self._billed = True
            self._spent += self._cost(config, usage)
        await self._settle_if_over()

    async def close(self, response: object) -> None:
        """The call returned (``response``) or failed (None): settle once its attempts have ended."""
        if self._started == 0 and isinstance(response, ProviderResponse):
            # Answered by a layer below without a provider attempt: its answer is what it spent.
            self._started = self._open = 1
            if isinstance(response, OpenedStream):
                response.on_end(self._stream_ended)
            else:
                await self.ended(None, "yes", response.usage)
        self._closed = True
        await self._settle_if_over()

    async def _stream_ended(self, end: StreamEnd) -> None:
        await self.ended(None, "yes", end.response.usage)

    def _cost(self, config: ProviderConfig | None, usage: Usage | None) -> Amounts:
        each = self._each
        if usage is None:
            return Amounts(each.cost_micro_usd, each.tokens, 0)
        if usage.total_tokens < 0:
            log.error("budget: %s reported negative usage (%d tokens); settled as zero",
                      config.identifier if config else "an answer", usage.total_tokens)
        cost, tokens = _micro_usd(usage.cost_usd), max(usage.total_tokens, 0)
        cap_cost, cap_tokens = self._capped
        if (cap_cost and cost > each.cost_micro_usd) or (cap_tokens and tokens > each.tokens):
            log.error("budget: %s reported usage above the call's worst case (%d micro-USD, %d tokens; "
                      "reserved %d, %d); settled at the reservation", config.identifier if config else "an answer",
                      cost, tokens, each.cost_micro_usd, each.tokens)
            cost = min(cost, each.cost_micro_usd) if cap_cost else cost
            tokens = min(tokens, each.tokens) if cap_tokens else tokens
        return Amounts(cost, tokens, 0)

    async def _settle_if_over(self) -> None:
        if not self._closed or self._open > 0 or self._settled:
            return
        self._settled = True
        for reservation in self._ids:
            self._renewals.stop(reservation)
        # Shielded: a caller cancelled now (a deadline, a client gone) must not leave the spend unsettled.
        settling = asyncio.get_running_loop().create_task(self._settle_all())
        self._renewals.keep(settling)
        await asyncio.shield(settling)

    async def _settle_all(self) -> None:
        left = attrs.evolve(self._spent, requests=1 if self._billed else 0)
        last, failed = len(self._ids) - 1, None
        for i, reservation in enumerate(self._ids):  # each settled at most at its own, the rest on the last
            share = left if i == last else Amounts(*(min(getattr(left, d), getattr(self._each, d))
                                                     for d in DIMENSIONS))
            left = Amounts(*(getattr(left, d) - getattr(share, d) for d in DIMENSIONS))
            try:
                await self._store.settle(reservation, share)
            except Exception as exc:  # the others are settled all the same
                failed = failed or exc
        if failed is not None:
            raise failed


class _Renewals:
    """The reservations of one budget layer whose calls are running, renewed by one loop timer: every
    quarter lease, each that has gone a quarter lease without a renewal gets a new lease, so a lease
    always has half of it left. A call costs two dict operations, not a timer of its own."""

    def __init__(self, store: BudgetStore, lease_s: float, clock: Clock) -> None:
        self._store, self._lease_s, self._clock = store, lease_s, clock
        self._running: dict[str, float] = {}  # reservation id -> loop time of its lease's start
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, reservation: str) -> None:
        loop = asyncio.get_running_loop()
        self._running[reservation] = loop.time()
        if self._timer is None or self._loop is not loop:  # none yet, or the loop it ran on is gone
            self._loop, self._timer = loop, loop.call_later(self._lease_s / 4, self._tick)

    def stop(self, reservation: str) -> None:
        self._running.pop(reservation, None)

    def keep(self, task: asyncio.Task[None]) -> None:
        """Hold ``task`` until it is done (a shielded settle outlives a cancelled caller)."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        for reservation, since in list(self._running.items()):
            if now - since >= self._lease_s / 4:
                self._running[reservation] = now
                task = loop.create_task(self._store.renew(reservation, now=self._clock(), lease_s=self._lease_s))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        self._timer = loop.call_later(self._lease_s / 4, self._tick) if self._running else None
