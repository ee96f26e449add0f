"""``timeout``: a call may lengthen or shorten its attempts' time limit.

The limit of each attempt is its configuration's ``timeout_s``, and the one place that
enforces it is where the request is made (the manager's terminal), so a timed-out attempt
is always ``AttemptTimeoutError(limit_s=...)``, recorded as such in ``response.attempts``
and in the ledger. This layer, innermost, hands the attempts of a call that sets
``controls={"attempt_timeout_s": x}`` a configuration whose ``timeout_s`` is ``x``.
"""

from __future__ import annotations

import attrs

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.middleware._common import seconds_control
from provmw.pipeline import Next, R

__all__ = ["TimeoutMiddleware"]


class TimeoutMiddleware:
    """Give each attempt the time limit ``controls={"attempt_timeout_s": x}`` asks for."""

    name = "timeout"
    priority = 200
    controls = frozenset({"attempt_timeout_s"})

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        limit_s = seconds_control(ctx, "attempt_timeout_s")
        if limit_s is None or limit_s == config.timeout_s:
            return await next(config)
        return await next(attrs.evolve(config, timeout_s=limit_s))
