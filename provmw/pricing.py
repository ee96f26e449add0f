"""Prices per million tokens, what a call cost, and what it could cost at worst.

A price is found, in order (ADR 0050): a configuration's own ``price``; the bundled table
(``prices.toml``, with the date it was taken: the common OpenAI and Anthropic chat and
embedding models, with their output ceilings and long-context tiers) by exact name; the
``genai-prices`` catalogue (some 350 models of OpenAI, Anthropic, Google, Bedrock and Azure),
imported on the first look-up that needs it and read from the data it ships with, at the
price in force now; the bundled table by the longest name the model starts with. A name the
catalogue matches to the table's model (a dated snapshot, an alias) takes the table's price.
A configuration's own price looks like this::

    [configurations.primary.price]
    input_usd_per_mtok = 0.15
    cached_input_usd_per_mtok = 0.075
    output_usd_per_mtok = 0.60
    cache_write_5m_usd_per_mtok = 0.1875   # unset: 1.25x input
    cache_write_1h_usd_per_mtok = 0.30     # unset: 2x input
    max_output_tokens = 16384

    [[configurations.primary.price.tiers]]  # every rate, once input exceeds the threshold
    above_input_tokens = 200000
    input_usd_per_mtok = 0.30
    output_usd_per_mtok = 1.20

Input tokens include cache reads and writes (ADR 0015): a usage is priced part by part.

A configuration's own price is declared for its provider and model and applies to them only
(ADR 0049): a layer that swaps in a configuration derived from it with another provider or
model (``attrs.evolve(config, provider="anthropic", model=...)``) is priced from the table and
the catalogue, by its own names. A model found in none has no price: its cost is ``None``, the
usage ledger records its attempts as billed ``"unknown"``, and one warning per configuration
says so.
"""

from __future__ import annotations

import datetime
import functools
import logging
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar

import attrs

from provmw._base.bounded import MAX_NAMES, KeepingLRU
from provmw.errors import ConfigurationError
from provmw.options import did_you_mean, number

if TYPE_CHECKING:
    from decimal import Decimal

    from genai_prices.data_snapshot import DataSnapshot
    from genai_prices.types import ModelInfo, ModelPrice, TieredPrices

    from provmw.config import ProviderConfig
    from provmw.responses import Usage

__all__ = ["CATALOGUE_PROVIDERS", "WRITE_1H_PER_INPUT", "WRITE_5M_PER_INPUT", "CacheTTL", "Price", "PriceTable",
           "PriceTier", "catalogue_price", "price_from_catalogue", "to_price"]

log = logging.getLogger(__name__)


CacheTTL = Literal["5m", "1h"]

# Anthropic's rule for the price of a cache write, as a multiple of the input rate; a price
# that does not give its write rates gets these, so a write is never priced below what the
# one provider that charges for writes asks (ADR 0015).
WRITE_5M_PER_INPUT = 1.25
WRITE_1H_PER_INPUT = 2.0

_RATE = number(ge=0)
_OPTIONAL_RATE = number(ge=0, optional=True)


@attrs.frozen
class _Rates:
    """The five rates of one tier, every default applied."""

    input: float
    output: float
    read: float
    write_5m: float
    write_1h: float

    def highest_input(self, ttl: CacheTTL | None) -> float:
        """The most one input token can cost: uncached, read, or written for the longest TTL asked."""
        writes = () if ttl is None else (self.write_5m,) if ttl == "5m" else (self.write_5m, self.write_1h)
        return max(self.input, self.read, *writes)


def _resolve(input: float, output: float, read: float | None, write_5m: float | None,
             write_1h: float | None) -> _Rates:
    return _Rates(input, output, input if read is None else read,
                  WRITE_5M_PER_INPUT * input if write_5m is None else write_5m,
                  WRITE_1H_PER_INPUT * input if write_1h is None else write_1h)


@attrs.frozen(kw_only=True)
class PriceTier:
    """The rates of every token of a call whose input tokens exceed ``above_input_tokens``.

    Unset read and write rates follow the tier's own input rate, as the base ones do.
    """

    above_input_tokens: int = attrs.field(validator=number(gt=0, integer=True))
    input_usd_per_mtok: float = attrs.field(validator=_RATE)
    output_usd_per_mtok: float = attrs.field(default=0.0, validator=_RATE)
    cached_input_usd_per_mtok: float | None = attrs.field(default=None, validator=_OPTIONAL_RATE)
    cache_write_5m_usd_per_mtok: float | None = attrs.field(default=None, validator=_OPTIONAL_RATE)
    cache_write_1h_usd_per_mtok: float | None = attrs.field(default=None, validator=_OPTIONAL_RATE)

    def rates(self) -> _Rates:
        return _resolve(self.input_usd_per_mtok, self.output_usd_per_mtok, self.cached_input_usd_per_mtok,
                        self.cache_write_5m_usd_per_mtok, self.cache_write_1h_usd_per_mtok)


def _tiers(value: Iterable[PriceTier | Mapping[str, Any]]) -> tuple[PriceTier, ...]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ConfigurationError(f"tiers must be a list of tables ([[...price.tiers]]), got {value!r}")
    tiers = tuple(t if isinstance(t, PriceTier) else _from_table(PriceTier, t, f"tiers[{i}]")
                  for i, t in enumerate(value))
    thresholds = [t.above_input_tokens for t in tiers]
    if thresholds != sorted(set(thresholds)):
        raise ConfigurationError(f"tiers must rise by above_input_tokens, each once; got {thresholds}")
    return tiers


def _unit_rates(value: Mapping[str, Any]) -> Mapping[str, float]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"units must be a table of USD per unit, got {value!r}")
    for unit, rate in value.items():
        if not isinstance(unit, str) or isinstance(rate, bool) or not isinstance(rate, int | float) \
                or not 0 <= rate < float("inf"):
            raise ConfigurationError(f"units.{unit}: expected a price of 0 or more USD per unit, got {rate!r}")
    return MappingProxyType({unit: float(rate) for unit, rate in value.items()})


@attrs.frozen(kw_only=True)
class Price:
    """USD per million tokens: input, output, cache reads, cache writes by TTL, and long-context tiers.

    An unset ``cached_input_usd_per_mtok`` is the input rate; unset write rates are 1.25x
    (5 minutes) and 2x (1 hour) the input rate. A tier replaces every rate once a call's
    input tokens (cache reads and writes included) exceed its ``above_input_tokens``.
    """

    input_usd_per_mtok: float = attrs.field(validator=_RATE)
    output_usd_per_mtok: float = attrs.field(default=0.0, validator=_RATE)
    cached_input_usd_per_mtok: float | None = attrs.field(default=None, validator=_OPTIONAL_RATE)
    cache_write_5m_usd_per_mtok: float | None = attrs.field(default=None, validator=_OPTIONAL_RATE)
    cache_write_1h_usd_per_mtok: float | None = attrs.field(default=None, validator=_OPTIONAL_RATE)
    max_output_tokens: int | None = attrs.field(default=None, validator=number(ge=0, integer=True, optional=True))
    tiers: tuple[PriceTier, ...] = attrs.field(default=(), converter=_tiers)
    # USD per unit of what is billed by other measures than tokens (ADR 0053): an image by size
    # and quality, a second of audio, a character spoken, a rerank search unit.
    units: Mapping[str, float] = attrs.field(factory=lambda: MappingProxyType({}), converter=_unit_rates, hash=False)
    # The (provider, model) a configuration declared this price for: set by the configuration,
    # never by a settings table, and kept by a configuration derived from it (ADR 0049).
    declared_for: tuple[str, str] | None = attrs.field(default=None, init=False, eq=False, repr=False)

    def declared(self, provider: str, model: str) -> Price:
        """This price, declared for ``provider``'s ``model`` only."""
        bound = attrs.evolve(self)
        object.__setattr__(bound, "declared_for", (provider, model))
        return bound

    def rates(self) -> _Rates:
        return _resolve(self.input_usd_per_mtok, self.output_usd_per_mtok, self.cached_input_usd_per_mtok,
                        self.cache_write_5m_usd_per_mtok, self.cache_write_1h_usd_per_mtok)

    def cost_usd(self, usage: Usage) -> float:
        """What ``usage`` cost: each part of the input at its own rate, all at the tier its input reached,
        and each unit at its own price (``covers`` says whether this price has one for each)."""
        rates = self._reached(usage.input_tokens)[-1]
        parts = usage.cached_input_tokens + usage.cache_write_5m_tokens + usage.cache_write_1h_tokens
        plain = max(usage.input_tokens - parts, 0)
        tokens = (plain * rates.input + usage.cached_input_tokens * rates.read
                  + usage.cache_write_5m_tokens * rates.write_5m + usage.cache_write_1h_tokens * rates.write_1h
                  + usage.output_tokens * rates.output) / 1e6
        return tokens + self.units_usd(usage.units) if usage.units else tokens

    def covers(self, units: Mapping[str, float]) -> bool:
        """Whether this price has a price for each of ``units``."""
        return all(unit in self.units for unit in units)

    def most_units_usd(self, units: Mapping[str, float]) -> float | None:
        """The most ``units`` may cost before the provider says what it billed: a part of a unit's
        name that is ``auto`` (``image:1024x1024:auto``, the provider choosing the quality) may be
        any this price names there, at the highest; None when a unit has no price at all."""
        total = 0.0
        for unit, count in units.items():
            rate = self.units.get(unit)
            if rate is None and ":auto" in unit:
                parts = unit.split(":")
                rates = [r for name, r in self.units.items() if _fits(name.split(":"), parts)]
                rate = max(rates, default=None)
            if rate is None:
                return None
            total += count * rate
        return total

    def units_usd(self, units: Mapping[str, float]) -> float:
        """What ``units`` cost, each at its price (0 for one without: ``covers`` tells them apart)."""
        return sum(count * self.units.get(unit, 0.0) for unit, count in units.items())

    def worst_case_usd(self, input_tokens: int, max_output_tokens: int | None, *,
                       cache_write_ttl: CacheTTL | None = None) -> float | None:
        """The most a call of at most ``input_tokens`` in and ``max_output_tokens`` out (else the model's
        ceiling) may cost: every token at the highest rate of any tier it may reach, input written to
        the cache when the call asks for caching; None when no output bound is known."""
        output = max_output_tokens if max_output_tokens is not None else self.max_output_tokens
        if output is None:
            return None
        reachable = self._reached(input_tokens)
        input_rate = max(rates.highest_input(cache_write_ttl) for rates in reachable)
        output_rate = max(rates.output for rates in reachable)
        return (input_tokens * input_rate + output * output_rate) / 1e6

    def _reached(self, input_tokens: int) -> list[_Rates]:
        """The base rates, then each tier ``input_tokens`` exceeds: the last one applies."""
        return [self.rates(), *(t.rates() for t in self.tiers if input_tokens > t.above_input_tokens)]


def _fits(name: list[str], pattern: list[str]) -> bool:
    return len(name) == len(pattern) and all(p in ("auto", n) for n, p in zip(name, pattern, strict=True))


def to_price(value: Price | Mapping[str, Any] | None) -> Price | None:
    """A ``Price`` from a settings table; unknown keys name a near match."""
    if value is None or isinstance(value, Price):
        return value
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"price must be a table of per-million-token prices, got {value!r}")
    return _from_table(Price, value, "price")


T = TypeVar("T", Price, PriceTier)


def _from_table(cls: type[T], value: object, where: str) -> T:
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where} must be a table, got {value!r}")
    known = [a.name for a in attrs.fields(cls)]
    for key in value:
        if key not in known:
            raise ConfigurationError(f"{where}: unknown key {key!r}{did_you_mean(key, known)}")
    try:
        return cls(**value)
    except TypeError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


@functools.cache
def _bundled() -> tuple[datetime.date, dict[tuple[str, str], Price]]:
    document = tomllib.loads(resources.files("provmw").joinpath("prices.toml").read_text(encoding="utf-8"))
    taken = document.pop("taken")
    prices = {(provider, model): Price(**entry)
              for provider, models in document.items() for model, entry in models.items()}
    return taken, prices


class PriceTable:
    """Finds a configuration's price: its own, else the table's by exact name, else the catalogue's,
    else the table's by longest-prefix model name.

    ``PriceTable()`` is the bundled table over the catalogue; a table built from ``prices`` holds
    those only, unless ``catalogue=True``.
    """

    def __init__(self, prices: Mapping[tuple[str, str], Price] | None = None,
                 taken: datetime.date | None = None, *, catalogue: bool | None = None) -> None:
        self.catalogue = prices is None if catalogue is None else catalogue
        if prices is None:
            taken, prices = _bundled()
        self.taken = taken
        self._prices = dict(prices)
        # Ad-hoc calls choose model names: remember the most recently used ones only (a model
        # looked up again after falling out warns again, which is all it costs).
        self._found: KeepingLRU[tuple[str, str], Price | None] = KeepingLRU(MAX_NAMES)
        self._warned: KeepingLRU[tuple[str, str, str], bool] = KeepingLRU(MAX_NAMES)  # (configuration, provider, model)

    def price_for(self, config: ProviderConfig) -> Price | None:
        """The price of calls on ``config``: its own when declared for its provider and model, else
        the table's; None (with one warning per configuration) when neither has one."""
        own = config.price
        if own is not None and own.declared_for == (config.provider, config.model):
            return own
        key = (config.provider, config.model)
        if key in self._found:
            self._found.move_to_end(key)
            found = self._found[key]
        else:
            self._found[key] = found = self._lookup(*key)
        if found is None:
            self._warn_unpriced(config)
        return found

    def lookup(self, config: ProviderConfig) -> Price | None:
        """What ``price_for`` finds, without its warning or its memory (``provmw check`` lists what
        has no price)."""
        own = config.price
        if own is not None and own.declared_for == (config.provider, config.model):
            return own
        return self._lookup(config.provider, config.model)

    def _warn_unpriced(self, config: ProviderConfig) -> None:
        warned = (config.identifier, config.provider, config.model)
        if warned in self._warned:
            return
        self._warned[warned] = True
        log.warning("pricing: configuration %r calls %s model %r, which has no price: its cost is unknown and "
                    "the usage ledger records its attempts as billed \"unknown\" (%s)",
                    config.identifier, config.provider, config.model, _pricing_hint(config))

    def warn_unpriced_units(self, config: ProviderConfig, units: Mapping[str, float]) -> None:
        """Warn, once per configuration and unit, that ``config``'s price names no price for a unit billed."""
        for unit in units:
            warned = (config.identifier, config.model, unit)
            if warned not in self._warned:
                self._warned[warned] = True
                log.warning("pricing: configuration %r was billed in %r, for which the price of %s model %r names "
                            "no price: its cost is unknown and the usage ledger records it as billed \"unknown\" "
                            "(add it under [configurations.%s.price.units])", config.identifier, unit,
                            config.provider, config.model, config.identifier)

    def _lookup(self, provider: str, model: str) -> Price | None:
        exact = self._prices.get((provider, model))
        if exact is not None:
            return exact
        prefixes = [m for (p, m) in self._prices if p == provider and model.startswith(m)]
        family = max(prefixes, key=len) if prefixes else None
        if not self.catalogue:
            return self._prices[(provider, family)] if family is not None else None
        return self._listed(provider, model, family)

    def _listed(self, provider: str, model: str, family: str | None) -> Price | None:
        """The catalogue's price of ``model``, unless it is the model the table names ``family`` (an
        alias or a dated snapshot of it): the table's entry applies then, as it would to its own name."""
        kept = self._prices[(provider, family)] if family is not None else None
        listed = _catalogue_model(provider, model)
        if listed is None or (family is not None and _catalogue_model(provider, family) is listed):
            return kept
        price = price_from_catalogue(listed.get_prices(datetime.datetime.now(datetime.UTC)))
        if price is None or price.max_output_tokens is not None or kept is None or kept.max_output_tokens is None:
            return price
        # The catalogue has no output ceilings: a model the table's family prefix caught keeps the
        # family's, as it had before the catalogue priced it (a strict budget reserves on it).
        return attrs.evolve(price, max_output_tokens=kept.max_output_tokens)


# provmw's provider names and the catalogue's provider ids (genai-prices' ``Provider.id``); a
# provider named here only is looked up in no catalogue.
CATALOGUE_PROVIDERS: Mapping[str, str] = MappingProxyType({
    "openai": "openai", "anthropic": "anthropic", "gemini": "google", "google": "google",
    "bedrock": "aws", "azure": "azure",
})


def catalogue_price(provider: str, model: str, at: datetime.datetime | None = None) -> Price | None:
    """The ``genai-prices`` catalogue's price of ``provider``'s ``model`` in force at ``at`` (now when
    None): None for a provider or model it does not know, or a model it prices by no token."""
    found = _catalogue_model(provider, model)
    if found is None:
        return None
    return price_from_catalogue(found.get_prices(at or datetime.datetime.now(datetime.UTC)))


def price_from_catalogue(prices: ModelPrice) -> Price | None:
    """A catalogue model's token prices as a ``Price``: its rates, and a tier at each threshold any
    of them changes at; None when it prices no token (audio hours, characters). Rates the catalogue
    leaves unset are what it charges for them: a cache read or write at the input rate."""
    per_token = [getattr(prices, key) for key in _TOKEN_KEYS]
    if all(value is None for value in per_token):
        # Nothing priced at all is free (Gemma on Google); priced only by other units is unknown.
        return None if any(v is not None for v in vars(prices).values()) else Price(input_usd_per_mtok=0.0)
    thresholds = sorted({tier.start for value in per_token for tier in getattr(value, "tiers", ())} - {0})
    return Price(**_catalogue_rates(prices, 0),
                 tiers=[PriceTier(above_input_tokens=t, **_catalogue_rates(prices, t)) for t in thresholds])


# The catalogue's per-million-token price keys that a provmw ``Usage`` has counts for.
_TOKEN_KEYS = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok", "cache_write_5m_mtok",
               "cache_write_1h_mtok")


class _RateFields(TypedDict):
    input_usd_per_mtok: float
    output_usd_per_mtok: float
    cached_input_usd_per_mtok: float | None
    cache_write_5m_usd_per_mtok: float
    cache_write_1h_usd_per_mtok: float


def _catalogue_rates(prices: ModelPrice, above: int) -> _RateFields:
    """The rates a call whose input tokens exceed ``above`` pays, as ``Price`` fields. In the
    catalogue an unpriced write falls to the write price above it, then to the input price."""
    rate = functools.partial(_rate, above=above)
    input = rate(prices.input_mtok) or 0.0
    write = rate(prices.cache_write_mtok)
    write_5m, write_1h = rate(prices.cache_write_5m_mtok), rate(prices.cache_write_1h_mtok)
    return _RateFields(input_usd_per_mtok=input, output_usd_per_mtok=rate(prices.output_mtok) or 0.0,
                       cached_input_usd_per_mtok=rate(prices.cache_read_mtok),
                       cache_write_5m_usd_per_mtok=next(r for r in (write_5m, write, input) if r is not None),
                       cache_write_1h_usd_per_mtok=next(r for r in (write_1h, write, input) if r is not None))


def _rate(value: Decimal | TieredPrices | None, above: int) -> float | None:
    """The rate ``value`` charges a call whose input tokens exceed ``above``: its last tier starting
    at or below it, else its base (a tier applies once input exceeds its start)."""
    from genai_prices.types import TieredPrices

    if value is None or not isinstance(value, TieredPrices):
        return None if value is None else float(value)
    reached = [tier.price for tier in value.tiers if tier.start <= above]
    return float(reached[-1] if reached else value.base)


def _catalogue_model(provider: str, model: str) -> ModelInfo | None:
    """The catalogue's model that ``provider``'s ``model`` names, if any."""
    catalogue_id = CATALOGUE_PROVIDERS.get(provider)
    if catalogue_id is None:
        return None
    if catalogue_id == "google":
        model = model.removeprefix("models/")  # the Gemini API's own spelling of a model's name
    try:
        return _catalogue().find_provider_model(model, None, catalogue_id, None)[1]
    except LookupError:
        return None


@functools.cache
def _catalogue() -> DataSnapshot:
    """The catalogue's data as its package ships it, loaded on first use. Never the package's
    process-wide snapshot, which its auto-update (never started here) would replace with one
    fetched from the network: prices do not change under a running table."""
    from genai_prices.data import providers
    from genai_prices.data_snapshot import DataSnapshot

    return DataSnapshot(providers=providers, from_auto_update=False)


def _pricing_hint(config: ProviderConfig) -> str:
    """How to give ``config``'s calls a price."""
    declared = config.price.declared_for if config.price is not None else None
    if declared is not None:
        return (f"its price is declared for {declared[0]} model {declared[1]!r} only; a layer that swaps in another "
                "provider or model must give the configuration it derives a price of its own")
    if config.is_ad_hoc:
        return "call a named configuration with a price instead"
    return f"set [configurations.{config.identifier}.price]"
