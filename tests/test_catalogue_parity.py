"""Catalogue parity (issue 37): what provmw records for a catalogue model is what genai-prices charges.

Every model the catalogue lists for the providers provmw maps (``CATALOGUE_PROVIDERS``) is named
the way a call would name it, by provmw's own provider names (``gemini`` and ``google``,
``bedrock``), and priced the way the stack prices it: ``PriceTable().price_for(config)``, then
``cost_usd(usage)``. ``genai_prices.calc_price``, given the catalogue's provider id and the same
name, is the oracle: it finds the model itself and does its own arithmetic. They must agree to
1e-9 USD on plain input, cached input, output, cache writes of both TTLs, and past every
threshold either side has a tier at.

Two groups are left out of that, each pinned here so a change shows: models the catalogue prices
in no token (audio hours, characters: no ``Price``), and models the bundled table prices on
purpose (ADR 0050), which must agree on the rates both publish but keep two documented
differences. Ten models also go the whole way: a call through the manager to the fake provider,
which reports a raw usage body, and the cost read back from the usage ledger.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import genai_prices
import pytest
from genai_prices import types as catalogue
from genai_prices.data import providers as catalogue_providers
from genai_prices.data_snapshot import DataSnapshot

from provmw import pricing
from provmw.cli.check import notes
from provmw.config import ProviderConfig
from provmw.manager import ServiceManager
from provmw.operations.responses_api import TOOL_UNITS
from provmw.plugins import PluginHost
from provmw.pricing import CATALOGUE_PROVIDERS, Price, PriceTable
from provmw.responses import Usage
from provmw.settings import Settings
from provmw.stores.usage import SqliteUsageStore
from provmw.testing import FakeProvider, Fault
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, anthropic_config, openai_config

TOLERANCE_USD = Decimal("1e-9")
NOW = datetime.datetime.now(datetime.UTC)
SNAPSHOT = DataSnapshot(providers=catalogue_providers, from_auto_update=False)
BUNDLED = {id(price) for price in pricing._bundled()[1].values()}
TOKEN_KEYS = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok", "cache_write_5m_mtok",
              "cache_write_1h_mtok")
# (input, cache read, 5-minute write, 1-hour write, output); input counts reads and writes (ADR 0015).
Counts = tuple[int, int, int, int, int]
BASIC: list[Counts] = [(1_000, 0, 0, 0, 0), (1_000, 800, 0, 0, 0), (0, 0, 0, 0, 1_000), (5_000, 1_000, 0, 0, 700)]
WRITES: list[Counts] = [(2_000, 0, 300, 200, 0), (5_000, 1_000, 500, 400, 700)]


def _strings(clause: Any) -> Iterator[str]:
    """The names a catalogue match clause spells out (an ``or`` clause's, in order)."""
    if isinstance(clause, catalogue.ClauseOr):
        for inner in clause.or_:
            yield from _strings(inner)
    for kind in ("equals", "starts_with", "contains"):
        if isinstance(getattr(clause, kind, None), str):
            yield getattr(clause, kind)


def call_name(provider_id: str, model: catalogue.ModelInfo) -> str | None:
    """A name a call would send that the catalogue finds ``model`` by: its id, else one its match
    spells out (Bedrock's ``regional.*`` ids and OpenAI's ``ft:gpt-4o`` are no names a call sends)."""
    for name in (model.id, *_strings(model.match)):
        try:
            if SNAPSHOT.find_provider_model(name, None, provider_id, None)[1] is model:
                return name
        except LookupError:
            continue
    return None


def provmw_names(provider_id: str) -> list[str]:
    return [ours for ours, theirs in CATALOGUE_PROVIDERS.items() if theirs == provider_id]


# (provmw provider, catalogue provider id, name, model): every model of the mapped providers.
MODELS = [(ours, p.id, call_name(p.id, m), m) for p in catalogue_providers if p.id in CATALOGUE_PROVIDERS.values()
          for m in p.models for ours in provmw_names(p.id)]


def provmw_price(table: PriceTable, provider: str, name: str) -> Price | None:
    logging.disable(logging.WARNING)  # an unpriced model warns once: the test asserts on it instead
    try:
        return table.price_for(ProviderConfig(identifier="c", provider=provider, model=name))
    finally:
        logging.disable(logging.NOTSET)


def tier_counts(price: Price, listed: catalogue.ModelPrice) -> list[Counts]:
    """Usages at, just past and well past every threshold either side has a tier at."""
    starts = {t.start for key in TOKEN_KEYS if isinstance(v := getattr(listed, key), catalogue.TieredPrices)
              for t in v.tiers} | {t.above_input_tokens for t in price.tiers}
    return [c for s in sorted(starts) for c in ((s, 0, 0, 0, 100), (s + 1, s // 2, 0, 0, 100),
                                               (2 * s, s, 1_000, 500, 3_000))]


def error_usd(price: Price, provider_id: str, name: str, counts: Counts) -> Decimal:
    """How far provmw's cost of ``counts`` is from what ``genai_prices.calc_price`` charges."""
    inp, read, write_5m, write_1h, out = counts
    ours = Usage(input_tokens=inp, output_tokens=out, cached_input_tokens=read,
                 cache_write_5m_tokens=write_5m, cache_write_1h_tokens=write_1h)
    theirs = catalogue.Usage(input_tokens=inp, output_tokens=out, cache_read_tokens=read,
                             cache_write_tokens=write_5m + write_1h, cache_write_5m_tokens=write_5m,
                             cache_write_1h_tokens=write_1h)
    charged = genai_prices.calc_price(theirs, name, provider_id=provider_id).total_price
    return abs(Decimal(repr(price.cost_usd(ours))) - charged)


def compared(*, bundled: bool = False) -> Iterator[tuple[str, str, str, catalogue.ModelInfo, Price]]:
    """Each (provider, catalogue id, name, model, price) of the models provmw prices from the catalogue
    (from the bundled table when ``bundled``). The table's media models (gpt-image-1, gpt-4o-transcribe,
    gpt-4o-mini-tts...) are priced by their units, their tokens at 0 (ADR 0053): not by tokens to compare."""
    table = PriceTable()
    for provider, provider_id, name, model in MODELS:
        price = provmw_price(table, provider, name) if name is not None else None
        # the built-in tools' fees (web search...) are units beside a chat model's tokens: still compared
        media = price is not None and bool(set(price.units) - set(TOOL_UNITS.values()))
        if name is not None and price is not None and (id(price) in BUNDLED) == bundled and not media:
            yield provider, provider_id, name, model, price


# The catalogue-priced models.

def test_every_model_of_the_mapped_providers_has_a_name_a_call_would_send() -> None:
    assert [(p, m.id) for p, _, name, m in MODELS if name is None] == []


def test_over_300_models_of_every_mapped_provider_are_priced_from_the_catalogue_by_their_names() -> None:
    distinct = {(provider_id, model.id) for _, provider_id, _, model, _ in compared()}
    assert len(distinct) >= 300
    assert {provider_id for provider_id, _ in distinct} == set(CATALOGUE_PROVIDERS.values())


def test_what_provmw_records_for_a_catalogue_model_is_what_the_catalogue_charges() -> None:
    off = []
    for provider, provider_id, name, model, price in compared():
        for counts in [*BASIC, *WRITES, *tier_counts(price, model.get_prices(NOW))]:
            if error_usd(price, provider_id, name, counts) > TOLERANCE_USD:
                off.append((provider, name, counts))
    assert off == []


def test_the_models_left_unpriced_are_those_the_catalogue_prices_in_no_token() -> None:
    table = PriceTable()
    unpriced = {(p, m.id) for p, _, name, m in MODELS if name and provmw_price(table, p, name) is None}
    by_tokens = {(p, m.id) for p, _, _, m in MODELS
                 if any(getattr(m.get_prices(NOW), key) is not None for key in TOKEN_KEYS)}
    assert unpriced and not unpriced & by_tokens
    # whisper-1, tts-1 and tts-1-hd, which the catalogue prices by audio hours and characters, are in
    # the bundled table by their units (ADR 0053)
    assert {name for _, name in unpriced} == {"gpt-live-1", "gpt-live-transcribe", "gpt-realtime-translate",
                                              "gpt-realtime-whisper", "gpt-transcribe"}


# The models the bundled table prices (ADR 0050: its entries override the catalogue's).

# What the table does on purpose that the catalogue does not: claude-sonnet-4 has its long-context
# tier past 200k input tokens, which the catalogue lacks. It may go away; no other difference may appear.
TABLE_DIFFERENCES = {("claude-sonnet-4-0", "tiers")}


def test_the_bundled_table_charges_what_the_catalogue_does_for_input_cached_input_and_output() -> None:
    priced = list(compared(bundled=True))
    off = [(name, counts) for _, provider_id, name, _, price in priced for counts in BASIC
           if error_usd(price, provider_id, name, counts) > TOLERANCE_USD]
    assert len(priced) >= 20 and off == []


def test_the_bundled_table_differs_from_the_catalogue_only_where_it_means_to() -> None:
    found = set()
    for _, provider_id, name, model, price in compared(bundled=True):
        usages = {"writes": WRITES, "tiers": tier_counts(price, model.get_prices(NOW))}
        found |= {(name, kind) for kind, counts in usages.items()
                  if any(error_usd(price, provider_id, name, c) > TOLERANCE_USD for c in counts)}
    assert found <= TABLE_DIFFERENCES


# The whole way: a call to the fake provider, which reports a raw usage body, and the ledger's cost.

def openai_body(prompt: int, cached: int, output: int, written: int = 0) -> dict[str, Any]:
    details = {"cached_tokens": cached, **({"cache_write_tokens": written} if written else {})}
    return {"prompt_tokens": prompt, "completion_tokens": output, "prompt_tokens_details": details}


def anthropic_body(plain: int, read: int, write_5m: int, write_1h: int, output: int) -> dict[str, Any]:
    return {"input_tokens": plain, "cache_read_input_tokens": read, "cache_creation_input_tokens": write_5m + write_1h,
            "cache_creation": {"ephemeral_5m_input_tokens": write_5m, "ephemeral_1h_input_tokens": write_1h},
            "output_tokens": output}


# Models the catalogue prices and the bundled table does not: a name the table's "gpt-5" and
# "claude-opus-4" start, a dated snapshot priced apart from its family, tiers past 272k and 100k.
THROUGH_THE_STACK: list[tuple[str, str, dict[str, Any]]] = [
    ("openai", "gpt-4-turbo", openai_body(1_200, 0, 300)),
    ("openai", "gpt-5-pro", openai_body(3_000, 0, 2_500)),
    ("openai", "gpt-4o-2024-05-13", openai_body(5_000, 0, 420)),
    ("openai", "o1", openai_body(20_480, 19_968, 1_500)),
    ("openai", "gpt-5.4", openai_body(300_000, 100_000, 4_000)),
    ("openai", "gpt-5.6-sol", openai_body(280_000, 150_000, 900, written=20_000)),
    ("anthropic", "claude-opus-4-6", anthropic_body(40, 12_000, 1_000, 3_000, 2_000)),
    ("anthropic", "claude-opus-4-1", anthropic_body(900, 7_000, 2_500, 0, 300)),
    ("anthropic", "claude-sonnet-4-6", anthropic_body(7, 60_000, 2_000, 3_000, 700)),
    ("anthropic", "claude-haiku-5-5", anthropic_body(50_000, 60_000, 1_000, 2_000, 700)),
]


def oracle_usd(provider: str, model: str, body: dict[str, Any]) -> Decimal:
    """What genai-prices charges for ``body``, read with its own usage extractor."""
    flavor = "chat" if provider == "openai" else "default"
    extracted = genai_prices.extract_usage({"model": model, "usage": body}, provider_id=provider, api_flavor=flavor)
    return genai_prices.calc_price(extracted.usage, model, provider_id=provider).total_price


async def ledger_cost(fake: FakeProvider, host: PluginHost, path: Path, provider: str, model: str) -> float | None:
    config = (openai_config if provider == "openai" else anthropic_config)(fake, model=model)
    settings = Settings(configurations={config.identifier: config},
                        middleware={**BUILTIN_MIDDLEWARE_OFF, "usage": {"path": str(path)}})
    async with ServiceManager(settings, host=host) as manager:
        await manager.chat("hi")
    store = SqliteUsageStore(path)
    [record] = await store.records()
    await store.aclose()
    return record.cost_usd if record.billed == "yes" else None


def test_the_models_called_through_the_stack_are_priced_from_the_catalogue() -> None:
    table = PriceTable()
    prices = [provmw_price(table, provider, model) for provider, model, _ in THROUGH_THE_STACK]
    assert all(price is not None and id(price) not in BUNDLED for price in prices)
    assert len({model for _, model, _ in THROUGH_THE_STACK}) == 10


@pytest.mark.parametrize(("provider", "model", "body"), THROUGH_THE_STACK, ids=[m for _, m, _ in THROUGH_THE_STACK])
async def test_the_ledger_records_what_the_catalogue_charges_for_a_call(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path, provider: str, model: str,
        body: dict[str, Any]) -> None:
    fake.script(Fault(usage=body))
    recorded = await ledger_cost(fake, builtin_only, tmp_path / "usage.db", provider, model)
    assert recorded is not None and abs(Decimal(repr(recorded)) - oracle_usd(provider, model, body)) <= TOLERANCE_USD


# provmw check: every configured model without a price is named, and no other.

CHECKED = {"turbo": ("openai", "gpt-4-turbo"), "gemini": ("gemini", "models/gemini-2.5-flash"),
           "bedrock": ("bedrock", "us.anthropic.claude-3-5-sonnet-20240620-v1:0"), "azure": ("azure", "gpt-4o"),
           "realtime": ("openai", "gpt-realtime-whisper"), "live": ("openai", "gpt-live-1"),  # audio hours only
           "house": ("openai", "house-model"),
           "deployment": ("azure", "gpt-4o-prod"), "local": ("vllm", "llama-3-8b")}


def test_check_names_each_model_priced_in_no_token_and_each_name_no_price_knows(tmp_path: Path) -> None:
    path = tmp_path / "provmw.toml"
    path.write_text("".join(f'[configurations.{name}]\nprovider = "{provider}"\nmodel = "{model}"\n'
                            for name, (provider, model) in CHECKED.items()))
    named = [note.split("[configurations.")[1].split("]")[0] for note in notes(path, {})]
    assert named == ["realtime", "live", "house", "deployment", "local"]
