"""``fallback``: walk a configuration's fallback chain on errors that another one may fix."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from provmw.config import ProviderConfig, fallback_chain
from provmw.context import ProviderCallContext
from provmw.errors import (
    ConfigurationError,
    ContextLengthExceededError,
    FallbackAttempt,
    FallbackExhaustedError,
    UnsupportedOperationError,
    disposition,
)
from provmw.pipeline import Next, R

__all__ = ["FallbackMiddleware"]

log = logging.getLogger(__name__)


class FallbackMiddleware:
    """Try the configuration, then each of its ``fallbacks`` in order, on fallback-eligible errors.

    Inactive and unknown entries are skipped, and so is the configuration's own identifier
    in its chain. A non-eligible error (authentication, invalid request, budget) propagates
    unchanged at once. A context-length error moves on only to a configuration whose
    ``context_window`` is known and larger. A configuration that cannot honour the call's
    needs (``ctx.facts.unmet``: tools, images, a response schema or format...) is skipped
    before anything is sent, never sent the call without them. With nothing left to try, a
    chain of one re-raises its error unchanged; a longer one raises ``FallbackExhaustedError``
    listing every attempt, skipped ones with the reason, with the primary's error as the
    cause. The response's ``served_by`` names the configuration that answered.
    """

    name = "fallback"
    priority = 600

    def __init__(self, configurations: Mapping[str, ProviderConfig]) -> None:
        self._configurations = dict(configurations)

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        if not config.fallbacks and config.active:  # the common case: no chain, no bookkeeping
            return await next(config)
        attempts: list[FallbackAttempt] = []
        min_window = 0  # after a context-length error: the window a candidate must exceed
        chain = ctx.facts.chain  # the manager's, unless a layer above handed down another configuration
        for candidate in chain if chain and chain[0] is config else self.chain(config):
            if min_window and (candidate.context_window or 0) <= min_window:
                continue
            if lacking := ctx.facts.unmet.get(candidate.identifier):
                attempts.append(_skipped(candidate, lacking))
                continue
            try:
                return await next(candidate)  # the terminal reads its key variables when it goes out
            except ConfigurationError as exc:  # a fallback's key missing: say which failure led here
                raise exc from (attempts[-1].error if attempts else None)
            except Exception as exc:
                if not _eligible(exc, candidate):
                    raise
                log.info("fallback: %s failed with %s; trying the next configuration",
                         candidate.identifier, type(exc).__name__)
                attempts.append(FallbackAttempt(candidate.identifier, exc))
                if isinstance(exc, ContextLengthExceededError):
                    min_window = max(min_window, candidate.context_window or 0)
        if not attempts:
            raise ConfigurationError(f"configuration {config.identifier!r} is inactive and its "
                                     "fallback chain has no active configuration")
        if len(attempts) == 1:
            raise attempts[0].error
        raise FallbackExhaustedError(attempts) from attempts[0].error

    def chain(self, config: ProviderConfig) -> list[ProviderConfig]:
        """The configurations a call on ``config`` may try, in order."""
        return fallback_chain(config, self._configurations)


def _skipped(candidate: ProviderConfig, lacking: tuple[str, ...]) -> FallbackAttempt:
    log.info("fallback: skipping %s, which cannot serve %s", candidate.identifier, ", ".join(lacking))
    error = UnsupportedOperationError(candidate.provider, ", ".join(lacking), configuration=candidate.identifier)
    return FallbackAttempt(candidate.identifier, error, sent=False)


def _eligible(exc: Exception, failed: ProviderConfig) -> bool:
    """May the walk go on after ``exc``? A context-length error only from a known window."""
    if isinstance(exc, ContextLengthExceededError):
        return failed.context_window is not None
    return disposition(exc).may_fall_back
