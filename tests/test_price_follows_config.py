"""The price follows what was called: a configuration's own price applies to the provider and model
it was declared for, a layer's swapped-in configuration is priced by its own names, and an
attempt nobody can price is billed "unknown" in the ledger, with one warning naming it."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from provmw.cli import main
from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.manager import ServiceManager
from provmw.pipeline import Next, R
from provmw.plugins import PluginHost
from provmw.pricing import Price, PriceTable
from provmw.settings import Settings
from provmw.stores.usage import SqliteUsageStore, UsageRecord
from provmw.testing import FakeProvider
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, openai_config

OWN = Price(input_usd_per_mtok=1.0, output_usd_per_mtok=2.0)
BACKUP = Price(input_usd_per_mtok=30.0, output_usd_per_mtok=60.0)
Swapping = Callable[[ProviderConfig], ProviderConfig]


class Swap:
    """A layer that hands the configuration ``swap`` derives down in place of the one it got."""

    name, priority = "swap", 900  # outside usage: the ledger records what was called

    def __init__(self, swap: Swapping) -> None:
        self.swap = swap

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        return await next(self.swap(config))


def to_anthropic(fake: FakeProvider, model: str, price: Price | None = None) -> Swapping:
    """``attrs.evolve`` to Anthropic's ``model``, with ``price`` when given (else the one it had)."""
    def swap(config: ProviderConfig) -> ProviderConfig:
        derived = attrs.evolve(config, provider="anthropic", model=model, base_url=fake.anthropic_base_url)
        return derived if price is None else attrs.evolve(derived, price=price)

    return swap


def manager(fake: FakeProvider, host: PluginHost, ledger: Path, swap: Swapping) -> ServiceManager:
    settings = Settings(configurations={"primary": openai_config(fake, identifier="primary", price=OWN)},
                        default="primary", middleware={**BUILTIN_MIDDLEWARE_OFF, "usage": {"path": str(ledger)}})
    return ServiceManager(settings, host=host, middleware=[Swap(swap)])


async def records(path: Path) -> list[UsageRecord]:
    store = SqliteUsageStore(path)
    found = await store.records()
    await store.aclose()
    return found


async def test_a_swapped_in_provider_and_model_is_priced_by_the_table_not_the_price_it_was_derived_from(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    haiku = PriceTable().price_for(ProviderConfig(identifier="h", provider="anthropic", model="claude-3-5-haiku"))
    async with manager(fake, builtin_only, tmp_path / "u.db", to_anthropic(fake, "claude-3-5-haiku-latest")) as m:
        response = await m.chat("one two three")
    assert response.provider == "anthropic" and haiku is not None
    assert response.usage.cost_usd == pytest.approx(haiku.cost_usd(response.usage))
    assert response.usage.cost_usd != pytest.approx(OWN.cost_usd(response.usage))


async def test_a_swapped_in_configuration_is_priced_by_its_own_price(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    async with manager(fake, builtin_only, tmp_path / "u.db", to_anthropic(fake, "claude-test", BACKUP)) as m:
        response = await m.chat("one two three")
    [record] = await records(tmp_path / "u.db")
    assert response.usage.cost_usd == pytest.approx(BACKUP.cost_usd(response.usage)) == record.cost_usd
    assert (record.provider, record.model, record.billed) == ("anthropic", "claude-test", "yes")


async def test_a_swapped_in_configuration_without_a_price_is_billed_unknown_with_a_warning(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="provmw.pricing"):
        async with manager(fake, builtin_only, tmp_path / "u.db", to_anthropic(fake, "claude-test")) as m:
            response = await m.chat("one two three")
    [record] = await records(tmp_path / "u.db")
    assert response.usage.cost_usd is None
    assert (record.model, record.cost_usd, record.billed) == ("claude-test", None, "unknown")
    assert [r.getMessage() for r in caplog.records if r.name == "provmw.pricing"] == [
        "pricing: configuration 'primary' calls anthropic model 'claude-test', which has no price: its cost is "
        "unknown and the usage ledger records its attempts as billed \"unknown\" (its price is declared for openai "
        "model 'gpt-test' only; a layer that swaps in another provider or model must give the configuration it "
        "derives a price of its own)"]


async def test_the_unpriced_warning_comes_once_per_configuration_not_per_call(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="provmw.pricing"):
        async with manager(fake, builtin_only, tmp_path / "u.db", to_anthropic(fake, "claude-test")) as m:
            for _ in range(3):
                await m.chat("one two three")
    assert len([r for r in caplog.records if r.name == "provmw.pricing"]) == 1
    assert [r.billed for r in await records(tmp_path / "u.db")] == ["unknown"] * 3


def test_a_price_given_with_the_derived_configuration_applies_to_it() -> None:
    primary = ProviderConfig(identifier="p", provider="openai", model="gpt-test", price=OWN)
    derived = attrs.evolve(primary, model="other-model", price=BACKUP)
    assert PriceTable({}).price_for(derived) == BACKUP
    assert PriceTable({}).price_for(attrs.evolve(primary, options={"temperature": 0.5})) == OWN


def test_the_price_carried_over_to_another_model_does_not_apply() -> None:
    primary = ProviderConfig(identifier="p", provider="openai", model="gpt-test", price=OWN)
    assert PriceTable({}).lookup(attrs.evolve(primary, model="gpt-test-2")) is None


def test_check_notes_every_configured_model_without_a_price_and_still_exits_zero(tmp_path: Path) -> None:
    path = tmp_path / "provmw.toml"
    path.write_text('[plugins]\nautoload = false\n'
                    '[configurations.a]\nprovider = "openai"\nmodel = "gpt-4o-mini"\n'
                    '[configurations.b]\nprovider = "openai"\nmodel = "house-model"\n'
                    '[configurations.c]\nprovider = "anthropic"\nmodel = "local"\nprice = { input_usd_per_mtok = 0 }\n'
                    '[configurations.d]\nprovider = "anthropic"\nmodel = "claude-next"\n')
    out = io.StringIO()
    assert main(["--config", str(path), "check"], out) == 0
    notes = [line for line in out.getvalue().splitlines() if line.startswith("  note: ")]
    assert [note.split("] ", 1)[1].split(" has no price")[0] for note in notes] == [
        "openai model 'house-model'", "anthropic model 'claude-next'"]
    assert "pricing (2 note(s)):" in out.getvalue() and "set [configurations.b.price]" in notes[0]
