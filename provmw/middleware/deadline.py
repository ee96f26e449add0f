"""``deadline``: one time limit for the whole logical call, across attempts and fallbacks."""

from __future__ import annotations

import attrs

from provmw._base.deadlines import Deadlines
from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import DeadlineExceededError
from provmw.middleware._common import Clock, monotonic, seconds_control
from provmw.options import number
from provmw.pipeline import Next, R

__all__ = ["DeadlineMiddleware", "DeadlineOptions"]


@attrs.frozen
class DeadlineOptions:
    """``[middleware.deadline]``: ``default_s`` (120 s) applies to calls that set no ``deadline_s``."""

    # A call is bounded by default: without it a provider that never answers holds the caller
    # for attempts x timeout_s x configurations (ADR 0007, amendment on default time limits).
    default_s: float | None = attrs.field(default=120.0, validator=number(gt=0, optional=True))


class DeadlineMiddleware:
    """Cancel everything inside (retries, waits, fallbacks) once the call's deadline passes.

    The limit is ``controls={"deadline_s": x}`` or the configured ``default_s`` (120 s unless
    set); ``enabled = false`` in ``[middleware.deadline]`` removes the limit. Raises ``DeadlineExceededError``, which
    nothing retries or falls back on.
    """

    name = "deadline"
    priority = 850
    controls = frozenset({"deadline_s"})

    def __init__(self, options: DeadlineOptions | None = None, *, clock: Clock = monotonic) -> None:
        self.options = options or DeadlineOptions()
        self._clock = clock
        self._limits = Deadlines()

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        limit_s = seconds_control(ctx, "deadline_s") or self.options.default_s
        if limit_s is None:
            return await next(config)
        started = self._clock()
        return await self._limits.run(limit_s, next(config),
                                      lambda: DeadlineExceededError(limit_s, self._clock() - started))
