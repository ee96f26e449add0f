"""``timeout``: a call sets its attempts' time limits; the terminal enforces them (ADR 0047).

The limit of each attempt is its configuration's ``timeout_s`` (for a stream: its
``first_chunk_timeout_s`` to the first content chunk and ``stream_idle_timeout_s`` between
chunks, each ``timeout_s`` when unset), and the one place that enforces them is where the
request is made (the manager's terminal), so a timed-out attempt is always an
``AttemptTimeoutError(limit_s=...)``, recorded as such in ``response.attempts`` and in the
ledger. This layer, innermost, hands the attempts of a call that sets
``controls={"attempt_timeout_s": x}`` (or ``first_chunk_timeout_s``,
``stream_idle_timeout_s``) a configuration with that limit.
"""

from __future__ import annotations

from typing import Any

import attrs

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.middleware._common import seconds_control
from provmw.pipeline import Next, R

__all__ = ["TimeoutMiddleware"]

# The controls and the configuration field each sets.
_FIELDS = {"attempt_timeout_s": "timeout_s", "first_chunk_timeout_s": "first_chunk_timeout_s",
           "stream_idle_timeout_s": "stream_idle_timeout_s"}


class TimeoutMiddleware:
    """Give each attempt the time limit ``controls={"attempt_timeout_s": x}`` asks for."""

    name = "timeout"
    priority = 200
    controls = frozenset(_FIELDS)

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        if not ctx.facts.controls:
            return await next(config)
        limits: dict[str, Any] = {field: limit_s for control, field in _FIELDS.items()
                  if (limit_s := seconds_control(ctx, control)) is not None and limit_s != getattr(config, field)}
        return await next(attrs.evolve(config, **limits) if limits else config)

