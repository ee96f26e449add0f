"""Call facts: what the manager knows about one call, computed in one place.

:func:`call_facts` is pure: it turns the operation, the configuration, the typed request
and the caller's arguments into one frozen :class:`~provmw.context.CallFacts`, and raises
``ConfigurationError`` for caller arguments of the wrong kind. A new built-in fact is a
field of ``CallFacts`` and a line here; the manager only calls this.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from provmw._checks import did_you_mean
from provmw.config import ProviderConfig
from provmw.context import CallFacts, FrozenMap, ProviderOperation
from provmw.errors import ConfigurationError
from provmw.pricing import PriceTable
from provmw.requests import CompletionRequest, EmbeddingRequest, ProviderRequest, is_deterministic, request_digest

__all__ = ["call_facts", "estimate_tokens"]

_IMAGE_CHARS = 340  # an image counts as this much text; what providers charge varies by size


def call_facts(operation: ProviderOperation, config: ProviderConfig, request: ProviderRequest, *,
               chain: Sequence[ProviderConfig], prices: PriceTable, known_controls: Collection[str],
               user: str | None = None, tenant: str | None = None, controls: Mapping[str, Any] | None = None,
               idempotency_key: str | None = None) -> CallFacts:
    """The facts of one call on ``config`` whose fallback chain is ``chain``."""
    estimated = estimate_tokens(request)
    max_output = _max_output_tokens(config, request)
    return CallFacts(
        user=_text("user", user), tenant=_text("tenant", tenant),
        controls=_controls(controls, known_controls),
        idempotency_key=_text("idempotency_key", idempotency_key),
        deterministic=is_deterministic(config, request),
        estimated_input_tokens=estimated, max_output_tokens=max_output,
        planned_cost_usd=prices.planned_cost_usd(chain, estimated, max_output),
        digest=lambda: request_digest(operation, config, request),
    )


def estimate_tokens(request: ProviderRequest) -> int:
    """A cheap upper-ish estimate (4 characters a token) for budgets and rate limits."""
    if isinstance(request, EmbeddingRequest):
        chars = sum(len(t) for t in request.inputs)
    elif isinstance(request, CompletionRequest):
        chars = len(request.prompt)
    else:
        chars = sum(len(m.text) + _IMAGE_CHARS * len(m.images) for m in request.messages)
    return chars // 4 + 1


def _max_output_tokens(config: ProviderConfig, request: ProviderRequest) -> int | None:
    options = getattr(request, "options", {})
    value = options.get("max_tokens", config.options.get("max_tokens"))
    return value if isinstance(value, int) else None


def _text(name: str, value: object) -> str | None:
    # An int user id would otherwise make a budget bucket nobody matches, and a fail-open
    # budget would let the call through uncounted.
    if value is not None and not isinstance(value, str):
        raise ConfigurationError(f"{name} must be a string, got {type(value).__name__} {value!r}")
    return value


def _controls(controls: Mapping[str, Any] | None, known: Collection[str]) -> FrozenMap:
    if controls is None:
        return FrozenMap()
    if not isinstance(controls, Mapping):
        raise ConfigurationError(f"controls must be a mapping of control names to values, got {controls!r}")
    for name in controls:
        if name not in known:
            names = sorted(known)
            raise ConfigurationError(f"controls: no installed middleware reads {name!r}"
                                     f"{did_you_mean(str(name), names)}; known: {', '.join(names) or 'none'}")
    return FrozenMap(controls)
