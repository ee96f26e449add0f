"""``usage``: one ledger record per attempt that reached a provider, and one per cache hit.

``usage`` sits just outside ``timeout`` (300), so it sees every attempt the retry and
fallback layers make, and sees a timed-out one as a timeout (billed ``unknown``: the
provider may have done the work); an answered attempt that could not be priced is billed
``unknown`` too (its cost is ``None``). ``usage_hits`` sits just outside ``cache`` (810) and
records the calls a cache answered, which never reach a provider and cost nothing.
Attempts of one logical call are numbered from 1 under its call id; a cache hit is
attempt 0. ``usage`` waits until its record is durable (in the store, or in the spill
file when the store cannot take it) before the answer or the error goes on, so a call
that returned has its billed records even if the process is killed next; concurrent calls
share one commit (:class:`~provmw.stores.usage.journal.UsageJournal`, ADR 0011). A stream's
attempt is recorded when the stream ends (ADR 0005), with the usage the provider reported or,
when it never came, an estimate marked ``billed = "estimated"``. A hit bills
nothing and does not wait, nor does a cancelled attempt: their records are queued, and
written or spilled at close at the latest::

    [middleware.usage]
    store = "sqlite"                  # or "memory", or a URL a plugin serves ("postgresql://...")
    path = "provmw.sqlite3"           # the SQLite ledger; records a store cannot take wait in <path>.spill
    synchronous = "normal"            # "full": a record also survives power loss (slower)
    failure_policy = "fail_open"      # never refuses; "fail_closed": refuse calls once
    max_journal_records = 50000       # this many records wait outside a failing store
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

import attrs

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import UsageLedgerUnavailableError
from provmw.middleware._common import Clock, monotonic
from provmw.options import number, one_of
from provmw.pipeline import Next, R
from provmw.responses import ProviderResponse
from provmw.stores.shared import masked_url
from provmw.stores.usage import UsageRecord, billed_for, ledger_location
from provmw.stores.usage.journal import FailurePolicy, UsageJournal
from provmw.streams import OpenedStream, StreamEnd

__all__ = ["UsageHitsMiddleware", "UsageMiddleware", "UsageOptions"]

@attrs.frozen(kw_only=True)
class UsageOptions:
    """``[middleware.usage]``: where the ledger lives and what a store outage means (the manager's
    state reads these and hands both usage layers one journal, ADR 0013)."""

    store: str = attrs.field(default="sqlite", validator=ledger_location, repr=masked_url)
    path: str = "provmw.sqlite3"
    failure_policy: FailurePolicy = attrs.field(default="fail_open",
                                                validator=one_of(("fail_open", "fail_closed")))
    max_journal_records: int = attrs.field(default=50_000, validator=number(gt=0, integer=True))
    synchronous: Literal["normal", "full"] = attrs.field(default="normal", validator=one_of(("normal", "full")))
    busy_timeout_s: float = attrs.field(default=5.0, validator=number(ge=0))


class UsageMiddleware:
    """Record every attempt that reached a provider: tokens, cost, latency, outcome."""

    name = "usage"
    priority = 300

    def __init__(self, *, journal: UsageJournal, wall_clock: Clock = time.time, clock: Clock = monotonic) -> None:
        self.journal = journal
        self._wall_clock = wall_clock
        self._clock = clock

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        await _admitted(self.journal)
        attempt = ctx.attempts.number()
        started, start = self._wall_clock(), self._clock()
        try:
            response = await next(config)
        except Exception as exc:
            billed = billed_for(exc)
            await self.journal.durable(_record(ctx, config, attempt, started, self._clock() - start,
                                               status="error", error_type=type(exc).__name__, billed=billed,
                                               cost_usd=0.0 if billed == "no" else None))
            raise
        except BaseException as exc:
            # Cancellation must stay prompt: the record is queued, and written or spilled by close.
            self.journal.record(_record(ctx, config, attempt, started, self._clock() - start, status="error",
                                        error_type=type(exc).__name__, billed="unknown"))
            raise
        if isinstance(response, OpenedStream):
            async def record_end(end: StreamEnd) -> None:
                await self.journal.durable(_answered(ctx, config, attempt, started, self._clock() - start,
                                                     end.response, **_how_it_ended(end)))

            response.on_end(record_end)
            return response
        await self.journal.durable(_answered(ctx, config, attempt, started, self._clock() - start, response))
        return response


async def _admitted(journal: UsageJournal) -> None:
    """Return if ``journal`` admits a new call; else give the loop a turn, then raise its refusal."""
    try:
        journal.admit()
    except UsageLedgerUnavailableError:
        # The journal looks for the store's return in a task of the loop: a caller that retries
        # every refusal at once must let it run, or the refusals never end.
        await asyncio.sleep(0)
        raise


class UsageHitsMiddleware:
    """Record the calls the cache answered (attempt 0, nothing billed); shares ``usage``'s journal."""

    name = "usage_hits"
    priority = 810

    def __init__(self, *, journal: UsageJournal, wall_clock: Clock = time.time, clock: Clock = monotonic) -> None:
        self.journal = journal
        self._wall_clock = wall_clock
        self._clock = clock

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        started, start = self._wall_clock(), self._clock()
        response = await next(config)
        if response.cached:
            # A hit bills nothing, so it does not wait for its record to reach the disk; but hits
            # that never wait for a socket must not outrun the writer (``room``: once a batch waits).
            self.journal.record(_record(ctx, config, 0, started, self._clock() - start,
                                        config_id=response.served_by or config.identifier,
                                        provider=response.provider, model=response.model,
                                        status="cache_hit", billed="no", cost_usd=0.0))
            await self.journal.room()
        return response


def _how_it_ended(end: StreamEnd) -> dict[str, Any]:
    """A stream's record: an error after its first chunk is an error; usage the provider never
    reported (a cut stream, a caller who stopped reading) is billed as estimated."""
    fields: dict[str, Any] = {"billed": "estimated"} if end.usage_estimated else {}
    if end.error is not None:
        fields.update(status="error", error_type=type(end.error).__name__)
    return fields


def _answered(ctx: ProviderCallContext, config: ProviderConfig, attempt: int, started: float, latency_s: float,
              response: ProviderResponse, **fields: Any) -> UsageRecord:
    usage = response.usage
    if usage.cost_usd is None:
        # Unpriced (no price for its provider and model; the price table warned, naming it): the
        # provider billed it at a price nobody here knows, so its cost is unknown, never 0 (ADR 0049).
        fields["billed"] = "unknown"
    return _record(ctx, config, attempt, started, latency_s, model=response.model, input_tokens=usage.input_tokens,
                   output_tokens=usage.output_tokens, cached_input_tokens=usage.cached_input_tokens,
                   cache_write_5m_tokens=usage.cache_write_5m_tokens, cache_write_1h_tokens=usage.cache_write_1h_tokens,
                   reasoning_tokens=usage.reasoning_tokens, cost_usd=usage.cost_usd, **fields)


def _record(ctx: ProviderCallContext, config: ProviderConfig, attempt: int, started: float, latency_s: float,
            **fields: Any) -> UsageRecord:
    # The configuration's names unless ``fields`` says otherwise (a hit: who served the answer).
    fields.setdefault("config_id", config.identifier)
    fields.setdefault("provider", config.provider)
    fields.setdefault("model", config.model)
    facts, principal = ctx.facts, ctx.facts.principal
    # A gateway call's key by its public id (the principal never holds the secret) and its team
    # as its budget bucket names it (ORGANISATION/TEAM); a direct call has neither.
    key_id, team = (None, None) if principal is None else (principal.key, principal.subject("team"))
    return UsageRecord(call_id=ctx.call_id, correlation_id=ctx.correlation_id, attempt=attempt, timestamp=started,
                       operation=ctx.operation.value, user=facts.user, tenant=facts.tenant, key_id=key_id, team=team,
                       latency_s=latency_s, **fields)
