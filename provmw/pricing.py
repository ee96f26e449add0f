"""Prices per million tokens, what a call cost, and what it could cost at worst.

The bundled table (``prices.toml``, with the date it was taken) covers the common
OpenAI and Anthropic chat and embedding models. A configuration's own ``price``
overrides it::

    [configurations.primary.price]
    input_usd_per_mtok = 0.15
    cached_input_usd_per_mtok = 0.075
    output_usd_per_mtok = 0.60
    max_output_tokens = 16384

A model found in neither has no price: its cost is ``None`` and one warning says so.
"""

from __future__ import annotations

import datetime
import functools
import logging
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

import attrs

from provmw._checks import did_you_mean, number
from provmw.errors import ConfigurationError

if TYPE_CHECKING:
    from provmw.config import ProviderConfig
    from provmw.responses import Usage

__all__ = ["Price", "PriceTable", "to_price"]

log = logging.getLogger(__name__)


@attrs.frozen(kw_only=True)
class Price:
    """USD per million input, cached-input and output tokens; cached input defaults to input."""

    input_usd_per_mtok: float = attrs.field(validator=number(ge=0))
    output_usd_per_mtok: float = attrs.field(default=0.0, validator=number(ge=0))
    cached_input_usd_per_mtok: float | None = attrs.field(default=None, validator=number(ge=0, optional=True))
    max_output_tokens: int | None = attrs.field(default=None, validator=number(ge=0, integer=True, optional=True))

    def cost_usd(self, usage: Usage) -> float:
        """What ``usage`` cost; cached input tokens are part of the input tokens."""
        cached = min(usage.cached_input_tokens, usage.input_tokens)
        cached_rate = self.input_usd_per_mtok if self.cached_input_usd_per_mtok is None \
            else self.cached_input_usd_per_mtok
        return ((usage.input_tokens - cached) * self.input_usd_per_mtok + cached * cached_rate
                + usage.output_tokens * self.output_usd_per_mtok) / 1e6

    def worst_case_usd(self, input_tokens: int, max_output_tokens: int | None) -> float | None:
        """The most a call may cost: every input token uncached, every output token used."""
        output = max_output_tokens if max_output_tokens is not None else self.max_output_tokens
        if output is None:
            return None
        return (input_tokens * self.input_usd_per_mtok + output * self.output_usd_per_mtok) / 1e6


def to_price(value: Price | Mapping[str, Any] | None) -> Price | None:
    """A ``Price`` from a settings table; unknown keys name a near match."""
    if value is None or isinstance(value, Price):
        return value
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"price must be a table of per-million-token prices, got {value!r}")
    known = [a.name for a in attrs.fields(Price)]
    for key in value:
        if key not in known:
            raise ConfigurationError(f"price: unknown key {key!r}{did_you_mean(key, known)}")
    try:
        return Price(**value)
    except TypeError as exc:
        raise ConfigurationError(f"price: {exc}") from None


@functools.cache
def _bundled() -> tuple[datetime.date, dict[tuple[str, str], Price]]:
    document = tomllib.loads(resources.files("provmw").joinpath("prices.toml").read_text(encoding="utf-8"))
    taken = document.pop("taken")
    prices = {(provider, model): Price(**entry)
              for provider, models in document.items() for model, entry in models.items()}
    return taken, prices


class PriceTable:
    """Finds a configuration's price: its own, else the table's by exact or longest-prefix model name."""

    def __init__(self, prices: Mapping[tuple[str, str], Price] | None = None,
                 taken: datetime.date | None = None) -> None:
        if prices is None:
            taken, prices = _bundled()
        self.taken = taken
        self._prices = dict(prices)
        self._found: dict[tuple[str, str], Price | None] = {}

    def price_for(self, config: ProviderConfig) -> Price | None:
        """The price of calls on ``config``, or None (with one warning per model) when unknown."""
        if config.price is not None:
            return config.price
        key = (config.provider, config.model)
        if key not in self._found:
            self._found[key] = found = self._lookup(*key)
            if found is None:
                log.warning("pricing: no price for %s model %r; its cost is unknown "
                            "(set [configurations.%s.price])", config.provider, config.model, config.identifier)
        return self._found[key]

    def planned_cost_usd(self, chain: Iterable[ProviderConfig], input_tokens: int,
                         max_output_tokens: int | None) -> float | None:
        """The worst case over a fallback chain, or None when any configuration in it is unpriced."""
        worst = 0.0
        for config in chain:
            price = self.price_for(config)
            cost = None if price is None else price.worst_case_usd(input_tokens, max_output_tokens)
            if cost is None:
                return None
            worst = max(worst, cost)
        return worst

    def _lookup(self, provider: str, model: str) -> Price | None:
        exact = self._prices.get((provider, model))
        if exact is not None:
            return exact
        prefixes = [m for (p, m) in self._prices if p == provider and model.startswith(m)]
        return self._prices[(provider, max(prefixes, key=len))] if prefixes else None
