"""``retry``: retry one configuration on transient errors, with backoff, hints and a budget.

The mechanism is tenacity's loop; the policy is here: which errors (``disposition``), how
long to wait (the server's hint, else full-jitter exponential backoff capped per wait),
and when to stop (attempts used up, a hint longer than the cap, or the retry budget of
the configuration spent). A hint longer than the cap means "do not wait here": the error
goes straight out so that the fallback can swap providers instead.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from typing import Any

import attrs
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from provmw._base.bounded import MAX_NAMES, KeepingLRU
from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import ConfigurationError, disposition
from provmw.middleware._common import Sleep
from provmw.options import number
from provmw.pipeline import Next, R

__all__ = ["RetryBudget", "RetryMiddleware", "RetryOptions", "full_jitter"]

log = logging.getLogger(__name__)

@attrs.frozen
class RetryOptions:
    """``[middleware.retry]``: attempts, backoff and the retry budget."""

    max_attempts: int = attrs.field(default=3, validator=number(ge=1, integer=True))
    base_s: float = attrs.field(default=0.5, validator=number(gt=0))
    max_wait_s: float = attrs.field(default=8.0, validator=number(gt=0))
    budget_share: float = attrs.field(default=0.2, validator=number(ge=0, le=1))
    budget_initial: float = attrs.field(default=10.0, validator=number(ge=0))
    budget_max: float = attrs.field(default=100.0, validator=number(ge=1))


class RetryBudget:
    """A token bucket shared by the calls of one configuration.

    Every first attempt deposits ``share`` of a token and every retry withdraws a whole
    one, so retries add at most ``share`` of the offered calls, plus what was saved up
    (``initial`` at the start, never more than ``maximum``).
    """

    __slots__ = ("_maximum", "_share", "_tokens", "refusals_in_a_row")

    def __init__(self, share: float, initial: float, maximum: float) -> None:
        self._share, self._maximum = share, maximum
        self._tokens = min(initial, maximum)
        self.refusals_in_a_row = 0

    def deposit(self) -> None:
        self._tokens = min(self._maximum, self._tokens + self._share)

    def withdraw(self) -> bool:
        """Take one retry's token; False when the budget is spent."""
        if self._tokens < 1:
            self.refusals_in_a_row += 1
            return False
        self._tokens -= 1
        self.refusals_in_a_row = 0
        return True


def full_jitter(attempt: int, base_s: float, max_wait_s: float, rng: random.Random) -> float:
    """The wait before retry number ``attempt`` (1-based): uniform in [0, min(cap, base * 2**(n-1))]."""
    return rng.uniform(0.0, min(max_wait_s, base_s * 2.0 ** min(attempt - 1, 64)))


class RetryMiddleware:
    """Retry the same configuration on retryable errors; see the module docstring."""

    name = "retry"
    priority = 500
    controls = frozenset({"max_attempts"})

    def __init__(self, options: RetryOptions | None = None, *, sleep: Sleep = asyncio.sleep,
                 rng: random.Random | None = None) -> None:
        self.options = options or RetryOptions()
        self._sleep = sleep
        self._rng = rng or random.Random()
        # One budget per configuration; ad-hoc calls choose names, so the least recently used
        # go past MAX_NAMES. A forgotten budget comes back with its initial tokens, which a
        # new name would get anyway.
        self.budgets: KeepingLRU[str, RetryBudget] = KeepingLRU(MAX_NAMES)

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        budget = self.budget(config.identifier)
        budget.deposit()
        max_attempts = _max_attempts(ctx.facts.controls, self.options.max_attempts)
        try:
            return await next(config)
        except Exception as exc:
            if max_attempts == 1 or not disposition(exc).retryable:
                raise
            first = exc
        # Building a tenacity loop costs tens of microseconds, so the first attempt runs
        # without one; the loop starts by replaying that attempt's error, then decides.
        result: R = await self._retrying(max_attempts, budget)(_replaying(first, next), config)
        return result

    def budget(self, config_id: str) -> RetryBudget:
        """The retry budget shared by every call on ``config_id``."""
        budget = self.budgets.used(config_id)
        if budget is None:
            o = self.options
            budget = self.budgets[config_id] = RetryBudget(o.budget_share, o.budget_initial, o.budget_max)
        return budget

    def _retrying(self, max_attempts: int, budget: RetryBudget) -> AsyncRetrying:
        o = self.options
        return AsyncRetrying(
            retry=retry_if_exception(lambda exc: disposition(exc).retryable),
            # Order matters: the budget is only drawn on when no other stop applies.
            stop=stop_after_attempt(max_attempts) | _HintOverCap(o.max_wait_s) | _BudgetSpent(budget),
            wait=_HintOrJitter(o.base_s, o.max_wait_s, self._rng),
            before_sleep=_log_retry,
            reraise=True,
            sleep=self._sleep,
        )


def _replaying(first: Exception, next: Next[R]) -> Next[R]:
    pending = [first]

    async def attempt(config: ProviderConfig, ctx: ProviderCallContext | None = None, /) -> R:
        if pending:
            raise pending.pop()
        return await (next(config) if ctx is None else next(config, ctx))

    return attempt


def _max_attempts(controls: Mapping[str, Any], default: int) -> int:
    value = controls.get("max_attempts", default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"controls['max_attempts'] must be an int of at least 1, got {value!r}")
    return value


def _hint(state: RetryCallState) -> float | None:
    error = state.outcome.exception() if state.outcome is not None else None
    return getattr(error, "retry_after_s", None)


class _HintOverCap(stop_base):
    def __init__(self, max_wait_s: float) -> None:
        self.max_wait_s = max_wait_s

    def __call__(self, retry_state: RetryCallState) -> bool:
        hint = _hint(retry_state)
        return hint is not None and hint > self.max_wait_s


class _BudgetSpent(stop_base):
    def __init__(self, budget: RetryBudget) -> None:
        self.budget = budget

    def __call__(self, retry_state: RetryCallState) -> bool:
        if self.budget.withdraw():
            return False
        if self.budget.refusals_in_a_row == 1:  # once per spell, not once per call
            log.warning("retry: the retry budget is spent; retries stop until calls refill it")
        return True


class _HintOrJitter(wait_base):
    def __init__(self, base_s: float, max_wait_s: float, rng: random.Random) -> None:
        self.base_s, self.max_wait_s, self.rng = base_s, max_wait_s, rng

    def __call__(self, retry_state: RetryCallState) -> float:
        hint = _hint(retry_state)
        if hint is not None:
            return hint
        return full_jitter(retry_state.attempt_number, self.base_s, self.max_wait_s, self.rng)


def _log_retry(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    config = state.args[0] if state.args else None
    log.info("retry: attempt %d failed on configuration=%s with %s; retrying in %.3fs",
             state.attempt_number, getattr(config, "identifier", "?"), type(error).__name__, wait)
