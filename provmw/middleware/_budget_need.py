"""What a refused call needed, who in its fallback chain set it, and why (issue 39).

Worked out only when a budget refuses, so the path of a call that fits pays nothing for it.
The reservation itself is the layer's (``Amounts``); this module finds which configuration
of the chain makes it that large: the most expensive at the call's input bound (cost), or
the one with the largest ``max_tokens`` (tokens), and says what would lower it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.errors import BudgetExceededError
from provmw.pricing import Price, PriceTable
from provmw.stores.budgets import Amounts, Refusal

__all__ = ["Need", "need", "refusal_error"]

_LOWER = "set options.max_tokens on that configuration or on the call to lower it"


@attrs.frozen
class Need:
    """What one attempt of a call reserves in the refused dimension, and why it is that much."""

    amount: int  # in the store's unit: micro-USD, tokens or requests
    set_by: str | None  # the configuration of the chain that set it (None for a request count)
    reason: str


def need(ctx: ProviderCallContext, config: ProviderConfig, amount: Amounts, dimension: str, *,
         strict: bool, prices: PriceTable) -> Need:
    """Why ``amount`` (one attempt's reservation) is what it is in ``dimension``."""
    reserved = getattr(amount, dimension)
    chain = ctx.facts.chain or (config,)
    call_options = ctx.facts.options
    embedding = ctx.operation is ProviderOperation.EMBEDDING
    if dimension == "requests":
        return Need(reserved, None, "each call counts as one request")
    if dimension == "tokens":
        return _tokens_need(ctx, chain, call_options, reserved, strict=strict)
    input_tokens = ctx.facts.max_input_tokens if strict else ctx.facts.estimated_input_tokens
    costliest, price, output = _costliest(chain, call_options, input_tokens, prices, embedding=embedding)
    head = f"the most expensive configuration of the fallback chain ({' -> '.join(c.identifier for c in chain)})"
    if not strict:
        return Need(reserved, costliest.identifier, f"the estimate of this call's cost (estimate mode); {head}")
    if embedding:
        why = f"{head}: at most {input_tokens} input tokens, each at its highest rate"
    elif output is None and price is not None:
        why = (f"{head} sets no max_tokens, so the model's output ceiling from its price "
               f"(max_output_tokens = {price.max_output_tokens}) was used; {_LOWER}")
    else:
        why = (f"{head} may answer with up to {output} tokens after at most {input_tokens} input tokens, "
               f"each at its highest rate; {_LOWER}")
    return Need(reserved, costliest.identifier, why)


def _tokens_need(ctx: ProviderCallContext, chain: Sequence[ProviderConfig], call_options: Mapping[str, Any],
                 reserved: int, *, strict: bool) -> Need:
    if ctx.operation is ProviderOperation.EMBEDDING:
        return Need(reserved, None, "the input of an embedding, at its bound")
    largest = max(chain, key=lambda c: _output_limit(c, call_options) or 0)
    what = "at most" if strict else "an estimate of"
    return Need(reserved, largest.identifier,
                f"{what} {reserved - (ctx.facts.max_output_tokens or 0)} input tokens plus the largest max_tokens "
                f"of the fallback chain ({_output_limit(largest, call_options)}, {largest.identifier!r}'s); {_LOWER}")


def _costliest(chain: Sequence[ProviderConfig], call_options: Mapping[str, Any], input_tokens: int,
               prices: PriceTable, *, embedding: bool) -> tuple[ProviderConfig, Price | None, int | None]:
    """The configuration whose worst case is highest, its price and its own output bound."""
    ranked = []
    for config in chain:
        price = prices.price_for(config)
        output = 0 if embedding else _output_limit(config, call_options)
        cost = price.worst_case_usd(input_tokens, output) if price is not None else None
        ranked.append((cost or 0.0, config, price, output))
    _, config, price, output = max(ranked, key=lambda row: row[0])
    return config, price, output


def _output_limit(config: ProviderConfig, call_options: Mapping[str, Any]) -> int | None:
    # As the call facts read it: the call's option over the configuration's, the larger of both names.
    bounds = [value for name in ("max_tokens", "max_completion_tokens")
              if isinstance(value := call_options[name] if name in call_options else config.options.get(name), int)]
    return max(bounds) if bounds else None


def refusal_error(refusal: Refusal, need: Need | None = None, *, further: bool = False) -> BudgetExceededError:
    """The error for ``refusal``: which bucket and dimension, and what this call (or attempt) needed."""
    bucket = refusal.bucket
    cost = refusal.dimension == "cost_micro_usd"
    scale = 1e6 if cost else 1.0
    return BudgetExceededError(
        f"{bucket.scope}:{bucket.subject}", limit=refusal.limit / scale, spent=refusal.spent / scale,
        reserved=refusal.reserved / scale, period=f"{bucket.period} {bucket.window}",
        resets_at=bucket.resets_at, dimension="cost_usd" if cost else refusal.dimension,
        needed=None if need is None else need.amount / scale, set_by=None if need is None else need.set_by,
        reason=None if need is None else need.reason, further_attempt=further)
