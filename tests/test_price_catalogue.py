"""The genai-prices catalogue behind the bundled table (ADR 0050): a configuration's own price first,
then the bundled table, then the catalogue, read from the data its package ships with, at the price
in force now, imported only when a look-up needs it."""

from __future__ import annotations

import datetime
import io
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path

import genai_prices.update_prices
import pytest
from genai_prices import types as catalogue_types
from genai_prices.data import providers as catalogue_providers
from genai_prices.data_snapshot import DataSnapshot, set_custom_snapshot

from provmw import pricing
from provmw.cli import main
from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.pricing import CATALOGUE_PROVIDERS, Price, PriceTable, catalogue_price, price_from_catalogue
from provmw.responses import Usage
from provmw.settings import Settings
from provmw.stores.usage import SqliteUsageStore
from provmw.testing import FakeProvider, Fault
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, openai_config

# A model of the catalogue only: the bundled table has no entry it starts with.
CATALOGUE_ONLY = "gpt-4-turbo"
OWN = Price(input_usd_per_mtok=1.0, output_usd_per_mtok=2.0)
NOW = datetime.datetime.now(datetime.UTC)


def config(provider: str, model: str, **fields: object) -> ProviderConfig:
    return ProviderConfig(identifier="c", provider=provider, model=model, **fields)  # type: ignore[arg-type]


def modules_after(code: str) -> set[str]:
    """The top-level packages imported after running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            env={"PROVMW_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": ""})
    return set(result.stdout.split())


# The order: own, table, catalogue.

async def test_a_model_only_the_catalogue_knows_is_priced_in_the_ledger(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    fake.script(Fault(usage={"prompt_tokens": 1000, "completion_tokens": 100}))
    settings = Settings(configurations={"oa": openai_config(fake, model=CATALOGUE_ONLY)},
                        middleware={**BUILTIN_MIDDLEWARE_OFF, "usage": {"path": str(tmp_path / "u.db")}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        response = await manager.chat("hi")
    store = SqliteUsageStore(tmp_path / "u.db")
    [record] = await store.records()
    await store.aclose()
    assert record.billed == "yes" and record.cost_usd == pytest.approx(1000 * 10 / 1e6 + 100 * 30 / 1e6)
    assert response.usage.cost_usd == pytest.approx(record.cost_usd)


def test_the_bundled_table_overrides_the_catalogue_for_a_model_both_know() -> None:
    bundled = pricing._bundled()[1][("openai", "gpt-4o")]
    assert catalogue_price("openai", "gpt-4o") not in (None, bundled)
    assert PriceTable().price_for(config("openai", "gpt-4o")) is bundled


def test_a_configurations_own_price_overrides_the_table_and_the_catalogue() -> None:
    assert PriceTable().price_for(config("openai", "gpt-4o", price=OWN)) == OWN
    assert PriceTable().price_for(config("openai", CATALOGUE_ONLY, price=OWN)) == OWN


def test_a_table_built_from_prices_reads_the_catalogue_only_when_asked() -> None:
    assert PriceTable({}).lookup(config("openai", CATALOGUE_ONLY)) is None
    assert PriceTable({}, catalogue=True).lookup(config("openai", CATALOGUE_ONLY)) is not None


def test_a_dated_snapshot_of_a_table_model_keeps_the_tables_price_and_tiers() -> None:
    bundled = pricing._bundled()[1][("anthropic", "claude-sonnet-4")]
    assert PriceTable().lookup(config("anthropic", "claude-sonnet-4-20250514")) is bundled


def test_another_model_that_a_table_name_starts_is_priced_as_the_catalogues_with_the_familys_ceiling() -> None:
    pro = PriceTable().lookup(config("openai", "gpt-5-pro"))  # "gpt-5" starts it, at a twelfth of its price
    assert pro is not None and (pro.input_usd_per_mtok, pro.output_usd_per_mtok) == (15.0, 120.0)
    assert pro.max_output_tokens == pricing._bundled()[1][("openai", "gpt-5")].max_output_tokens


# Provider names.

@pytest.mark.parametrize(("provider", "model"), [
    ("openai", "gpt-4-turbo"), ("anthropic", "claude-3-5-haiku-latest"), ("gemini", "gemini-2.5-flash"),
    ("gemini", "models/gemini-2.5-flash"), ("google", "gemini-2.5-pro"), ("azure", "gpt-4o"),
    ("bedrock", "anthropic.claude-3-5-sonnet-20240620-v1:0"),
    ("bedrock", "us.anthropic.claude-3-5-sonnet-20240620-v1:0"),
])
def test_provmws_provider_names_find_the_catalogues_providers(provider: str, model: str) -> None:
    assert PriceTable().lookup(config(provider, model)) is not None


@pytest.mark.parametrize("provider", ["mistral-local", "vllm", "aws", "openrouter"])
def test_a_provider_not_mapped_is_not_found(provider: str) -> None:
    assert PriceTable().lookup(config(provider, "gpt-4o")) is None


def test_an_azure_deployment_name_is_not_a_model_name() -> None:
    assert PriceTable().lookup(config("azure", "gpt-4o-prod")) is None


# Mapping the catalogue's prices.

def test_a_price_that_changes_by_date_is_the_one_in_force_at_the_time_asked() -> None:
    before = catalogue_price("openai", "o3", at=datetime.datetime(2025, 6, 1, tzinfo=datetime.UTC))
    after = catalogue_price("openai", "o3", at=datetime.datetime(2025, 7, 1, tzinfo=datetime.UTC))
    assert before is not None and after is not None
    assert (before.input_usd_per_mtok, after.input_usd_per_mtok) == (10.0, 2.0)


def test_a_table_prices_from_the_catalogue_at_the_wall_clock() -> None:
    found = PriceTable({}, catalogue=True).lookup(config("openai", "o3"))
    assert found == catalogue_price("openai", "o3", at=datetime.datetime.now(datetime.UTC))
    assert found != catalogue_price("openai", "o3", at=datetime.datetime(2025, 6, 1, tzinfo=datetime.UTC))


def test_a_tiered_catalogue_price_becomes_a_tier_at_its_threshold() -> None:
    found = catalogue_price("gemini", "gemini-2.5-pro")
    assert found is not None and [t.above_input_tokens for t in found.tiers] == [200_000]
    assert found.tiers[0].input_usd_per_mtok > found.input_usd_per_mtok


def test_a_cache_write_the_catalogue_does_not_price_costs_the_input_rate_as_it_charges() -> None:
    found = catalogue_price("openai", CATALOGUE_ONLY)
    assert found is not None
    assert found.cache_write_5m_usd_per_mtok == found.cache_write_1h_usd_per_mtok == found.input_usd_per_mtok


def test_a_model_the_catalogue_prices_by_no_token_has_no_price() -> None:
    assert catalogue_price("openai", "whisper-1") is None


def test_a_model_the_catalogue_lists_without_any_price_is_free() -> None:
    assert catalogue_price("gemini", "gemma-3") == Price(input_usd_per_mtok=0.0)


# Coverage: every model of the mapped providers.

MAPPED = [(p.id, m) for p in catalogue_providers if p.id in set(CATALOGUE_PROVIDERS.values()) for m in p.models]
TOKEN_KEYS = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok", "cache_write_5m_mtok",
              "cache_write_1h_mtok")


def test_every_model_of_the_mapped_providers_with_a_token_price_gets_a_price() -> None:
    unpriced = [(p, m.id) for p, m in MAPPED if price_from_catalogue(m.get_prices(NOW)) is None]
    by_tokens = [(p, m.id) for p, m in MAPPED if any(getattr(m.get_prices(NOW), k) is not None for k in TOKEN_KEYS)]
    assert len(MAPPED) > 300 and len(unpriced) < 20
    assert not set(unpriced) & set(by_tokens)


# (input, cache read, 5-minute write, 1-hour write, output): below, at and past every threshold in use.
USAGES = [(1_000, 0, 0, 0, 500), (60_000, 40_000, 5_000, 3_000, 2_000), (200_000, 100_000, 0, 0, 4_000),
          (200_001, 150_000, 20_000, 10_000, 8_000), (272_001, 0, 0, 0, 100), (1_500_000, 900_000, 1, 2, 30_000)]


@pytest.mark.parametrize("counts", USAGES, ids=[f"in{c[0]}" for c in USAGES])
def test_every_price_costs_what_the_catalogue_charges(counts: tuple[int, int, int, int, int]) -> None:
    inp, read, write_5m, write_1h, out = counts
    ours = Usage(input_tokens=inp, output_tokens=out, cached_input_tokens=read,
                 cache_write_5m_tokens=write_5m, cache_write_1h_tokens=write_1h)
    theirs = catalogue_types.Usage(input_tokens=inp, output_tokens=out, cache_read_tokens=read,
                                   cache_write_tokens=write_5m + write_1h, cache_write_5m_tokens=write_5m,
                                   cache_write_1h_tokens=write_1h)
    off = []
    for provider, model in MAPPED:
        listed, price = model.get_prices(NOW), price_from_catalogue(model.get_prices(NOW))
        if price is not None and abs(Decimal(repr(price.cost_usd(ours))) - listed.calc_price(theirs)["total_price"]) \
                > Decimal("1e-9"):
            off.append((provider, model.id))
    assert off == []


# Budgets.

def budget_settings(fake: FakeProvider, path: Path, **options: int) -> Settings:
    return Settings(configurations={"oa": openai_config(fake, model=CATALOGUE_ONLY, options=options)},
                    middleware={**BUILTIN_MIDDLEWARE_OFF, "budget": {
                        "path": str(path), "limits": [{"scope": "global", "period": "total", "max_cost_usd": 1.0}]}})


async def test_a_strict_budget_on_a_catalogue_only_model_with_max_tokens_reserves_and_settles(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    async with ServiceManager(budget_settings(fake, tmp_path / "b.db", max_tokens=10), host=builtin_only) as manager:
        response = await manager.chat("hi")
        [state] = await manager.state.budget_store().states(now=time.time())
    assert response.usage.cost_usd is not None and response.usage.cost_usd > 0
    assert (state.spent.cost_micro_usd, state.reserved.cost_micro_usd) == (round(response.usage.cost_usd * 1e6), 0)


async def test_a_strict_budget_on_a_catalogue_only_model_without_max_tokens_asks_for_it(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    async with ServiceManager(budget_settings(fake, tmp_path / "b.db"), host=builtin_only) as manager:
        with pytest.raises(ConfigurationError, match="max_tokens"):  # the catalogue has no output ceilings
            await manager.chat("hi")


# What imports when, and what the catalogue may do.

def test_import_provmw_and_a_manager_do_not_import_the_catalogue() -> None:
    assert "genai_prices" not in modules_after("import provmw\nprovmw.ServiceManager()")


def pricing_code(model: str) -> str:
    """Code that prices one call on OpenAI's ``model`` with the manager's table."""
    return ("from provmw.config import ProviderConfig\nfrom provmw.pricing import PriceTable\n"
            f"assert PriceTable().price_for(ProviderConfig(identifier='c', provider='openai', model={model!r}))")


def test_pricing_a_model_of_the_bundled_table_does_not_import_the_catalogue() -> None:
    assert "genai_prices" not in modules_after(pricing_code("gpt-4o"))


def test_the_catalogue_is_imported_by_the_first_look_up_that_needs_it() -> None:
    assert "genai_prices" in modules_after(pricing_code(CATALOGUE_ONLY))


def test_a_catalogue_look_up_is_remembered_by_the_table() -> None:
    table = PriceTable()
    assert table.price_for(config("openai", CATALOGUE_ONLY)) is table.price_for(config("openai", CATALOGUE_ONLY))


def test_pricing_from_the_catalogue_starts_no_update() -> None:
    assert PriceTable().lookup(config("openai", CATALOGUE_ONLY)) is not None
    updater = genai_prices.update_prices._shared_updater
    assert (updater.thread, updater.ref_count) == (None, 0)
    assert "genai_prices:update" not in [thread.name for thread in threading.enumerate()]


def test_a_snapshot_set_in_the_catalogues_process_state_is_never_read() -> None:
    set_custom_snapshot(DataSnapshot(providers=[], from_auto_update=True))  # what its auto-update would set
    try:
        assert catalogue_price("openai", CATALOGUE_ONLY) is not None
    finally:
        set_custom_snapshot(None)


def test_pricing_from_the_catalogue_opens_no_connection() -> None:
    code = ("import socket\n"
            "def refuse(*args, **kwargs): raise AssertionError('network')\n"
            "socket.socket.connect = refuse; socket.getaddrinfo = refuse; socket.create_connection = refuse\n"
            "from provmw.pricing import catalogue_price\n"
            f"assert catalogue_price('openai', '{CATALOGUE_ONLY}') is not None")
    assert "genai_prices" in modules_after(code)


# provmw check.

def test_check_notes_only_what_neither_the_table_nor_the_catalogue_prices(tmp_path: Path) -> None:
    path = tmp_path / "provmw.toml"
    path.write_text('[plugins]\nautoload = false\n'
                    f'[configurations.a]\nprovider = "openai"\nmodel = "{CATALOGUE_ONLY}"\n'
                    '[configurations.b]\nprovider = "openai"\nmodel = "house-model"\n')
    out = io.StringIO()
    assert main(["--config", str(path), "check"], out) == 0
    notes = [line for line in out.getvalue().splitlines() if line.startswith("  note: ")]
    assert len(notes) == 1 and "[configurations.b]" in notes[0]
