"""``timeout``: a wall-clock limit on each attempt, innermost so that every retry gets its own."""

from __future__ import annotations

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import AttemptTimeoutError
from provmw.middleware._common import run_within, seconds_control
from provmw.pipeline import Next, R

__all__ = ["TimeoutMiddleware"]


class TimeoutMiddleware:
    """Cancel an attempt after the configuration's ``timeout_s`` (or ``controls={"attempt_timeout_s": x}``).

    Raises ``AttemptTimeoutError``, a ``ProviderTimeoutError`` that names the limit, so
    retry and fallback treat it like any provider timeout. The adapters' own socket
    timeouts stay as a backstop at the same value.
    """

    name = "timeout"
    priority = 200
    controls = frozenset({"attempt_timeout_s"})

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        limit_s = seconds_control(ctx, "attempt_timeout_s") or config.timeout_s
        return await run_within(limit_s, next(config), lambda: AttemptTimeoutError(
            f"attempt on {config.identifier!r} exceeded its timeout of {limit_s:g}s",
            limit_s=limit_s, provider=config.provider, model=config.model))
