"""``rate_limit``: per-configuration requests and tokens per minute, and concurrency."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import attrs

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import ConfigurationError, LocalRateLimitError
from provmw.middleware._common import Clock, Sleep, monotonic
from provmw.options import number, options_from
from provmw.pipeline import Next, R
from provmw.stores.rate_limits import MemoryRateLimiter, RateLimiter, RateLimits
from provmw.streams import OpenedStream, StreamEnd

__all__ = ["RateLimitMiddleware", "RateLimitOptions"]


def _limits(value: Mapping[str, Any]) -> dict[str, RateLimits]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"limits must be a table of configuration names, got {value!r}")
    return {name: v if isinstance(v, RateLimits) else options_from(RateLimits, v, f"limits.{name}")
            for name, v in value.items()}


@attrs.frozen
class RateLimitOptions:
    """``[middleware.rate_limit]``: ``limits`` per configuration identifier (``"*"``: every other one)."""

    max_wait_s: float = attrs.field(default=5.0, validator=number(ge=0))
    limits: Mapping[str, RateLimits] = attrs.field(factory=dict, converter=_limits)


class RateLimitMiddleware:
    """Hold a call until its configuration's limits admit it, for at most ``max_wait_s``.

    Tokens are estimated before the call (prompt estimate plus ``max_tokens``) and
    corrected with the response's usage after it. One admission covers the call's
    retries, which the retry budget already bounds. A call that cannot be admitted in
    time fails with ``LocalRateLimitError`` (the fallback may act on it), having sent
    nothing upstream; one that would have to wait longer than allowed fails at once.
    """

    name = "rate_limit"
    priority = 550

    def __init__(self, options: RateLimitOptions | None = None, *, limiter: RateLimiter | None = None,
                 clock: Clock = monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self.options = options or RateLimitOptions()
        self.limiter: RateLimiter = limiter if limiter is not None else MemoryRateLimiter()
        self._clock = clock
        self._sleep = sleep

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        limits = self.options.limits.get(config.identifier) or self.options.limits.get("*")
        if limits is None:
            return await next(config)
        tokens = ctx.facts.estimated_input_tokens + (ctx.facts.max_output_tokens or 0)
        permit = await self._admit(config, limits, tokens)

        async def release(used: int) -> None:
            await self.limiter.release(config.identifier, limits, permit=permit, reserved=tokens, used=used,
                                       now=self._clock())

        try:
            response = await next(config)
        except BaseException:
            await release(0)
            raise
        if isinstance(response, OpenedStream):  # a stream holds its slot, and learns its tokens, to the end
            async def release_end(end: StreamEnd) -> None:
                await release(end.response.usage.total_tokens)

            response.on_end(release_end)
            return response
        await release(response.usage.total_tokens)
        return response

    async def _admit(self, config: ProviderConfig, limits: RateLimits, tokens: int) -> str:
        started = self._clock()
        while True:
            grant = await self.limiter.acquire(config.identifier, limits, tokens, self._clock())
            if grant.admitted:
                return grant.permit
            waited = self._clock() - started
            if waited + grant.wait_s > self.options.max_wait_s:
                await asyncio.sleep(0)  # a caller retrying at once must still let the loop run
                raise LocalRateLimitError(
                    f"{grant.limit} of {config.identifier!r} would need a wait of {waited + grant.wait_s:.3g}s, "
                    f"over max_wait_s={self.options.max_wait_s:g}",
                    limit=grant.limit or "", config_id=config.identifier,
                    provider=config.provider, model=config.model, retry_after_s=grant.wait_s,
                )
            await self._sleep(grant.wait_s)
