"""Images, transcription and speech through the ServiceManager, priced from the bundled table:
the ledger's row of each is priced by its units, and a strict budget refuses, before anything is
sent, a call whose worst case exceeds what is left."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provmw.config import ProviderConfig
from provmw.errors import BudgetExceededError, ConfigurationError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.stores.usage import SqliteUsageStore, UsageRecord
from provmw.testing import FakeProvider, wav
from tests.conftest import openai_config


def settings(config: ProviderConfig, ledger: Path, max_cost_usd: float | None = None) -> Settings:
    middleware: dict[str, Any] = {"usage": {"path": str(ledger)}}
    if max_cost_usd is not None:
        middleware["budget"] = {"path": str(ledger), "limits": [{"scope": "global", "period": "total",
                                                                  "max_cost_usd": max_cost_usd}]}
    return Settings(configurations={"oa": config}, middleware=middleware)


async def rows(path: Path) -> list[UsageRecord]:
    store = SqliteUsageStore(path)
    try:
        return await store.records()
    finally:
        await store.aclose()


async def test_an_image_calls_row_is_priced_per_image_by_size_and_quality(fake: FakeProvider, builtin_only: PluginHost,
                                                                          tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    async with ServiceManager(settings(openai_config(fake, model="dall-e-3"), ledger), host=builtin_only) as manager:
        response = await manager.generate_image("a cat", quality="hd", size="1792x1024", n=2)
    [row] = await rows(ledger)
    assert (row.operation, row.billed, row.status) == ("image", "yes", "ok")
    assert row.cost_usd == pytest.approx(0.24) and response.usage.cost_usd == pytest.approx(0.24)


async def test_an_edits_row_is_priced_per_image_too(fake: FakeProvider, builtin_only: PluginHost,
                                                    tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    async with ServiceManager(settings(openai_config(fake, model="dall-e-2"), ledger), host=builtin_only) as manager:
        await manager.edit_image("add a hat", b"\x89PNG source", size="256x256", n=3)
    [row] = await rows(ledger)
    assert row.operation == "image_edit" and row.cost_usd == pytest.approx(0.048)


async def test_transcription_and_speech_rows_are_priced_by_the_second_and_the_character(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    configs = {"whisper": openai_config(fake, identifier="whisper", model="whisper-1"),
               "voice": openai_config(fake, identifier="voice", model="tts-1-hd")}
    async with ServiceManager(Settings(configurations=configs, middleware={"usage": {"path": str(ledger)}}),
                              host=builtin_only) as manager:
        await manager.transcribe(wav(2.5), configuration="whisper")
        await manager.speak("hello there", configuration="voice")
    costs = {row.operation: row.cost_usd for row in await rows(ledger)}
    assert costs == {"transcription": pytest.approx(3 * 0.0001), "speech": pytest.approx(11 * 0.00003)}


async def test_a_strict_budget_refuses_an_image_whose_worst_case_exceeds_what_is_left_before_sending(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    config = openai_config(fake, model="dall-e-3")
    async with ServiceManager(settings(config, ledger, max_cost_usd=0.10), host=builtin_only) as manager:
        await manager.generate_image("a cat", quality="hd")  # 0.08 spent, 0.02 left
        with pytest.raises(BudgetExceededError):
            await manager.generate_image("a dog")  # 0.04 at standard
    assert fake.count(route="images") == 1
    assert [row.cost_usd for row in await rows(ledger)] == [pytest.approx(0.08)]


async def test_a_strict_budget_refuses_more_images_than_it_can_pay_for(fake: FakeProvider, builtin_only: PluginHost,
                                                                       tmp_path: Path) -> None:
    config = openai_config(fake, model="gpt-image-1")
    async with ServiceManager(settings(config, tmp_path / "l.sqlite3", max_cost_usd=0.40), host=builtin_only) as m:
        with pytest.raises(BudgetExceededError):
            await m.generate_image("a cat", quality="high", n=3)  # 3 x 0.167
        await m.generate_image("a cat", quality="high", n=2)
    assert fake.count(route="images") == 1


async def test_a_gpt_image_1_call_without_a_quality_reserves_the_dearest_quality_and_settles_the_one_made(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    config = openai_config(fake, model="gpt-image-1")
    async with ServiceManager(settings(config, tmp_path / "l.sqlite3", max_cost_usd=1.0), host=builtin_only) as m:
        ctx_needs = m.prices.price_for(m.settings.configurations["oa"])
        assert ctx_needs is not None
        response = await m.generate_image("a cat")
    [(unit, count)] = response.usage.units.items()
    assert unit.startswith("image:1024x1024:") and count == 1
    assert response.usage.cost_usd == pytest.approx(ctx_needs.units[unit] + response.usage.input_tokens * 10.0 / 1e6)
    assert ctx_needs.most_units_usd({"image:1024x1024:auto": 1}) == ctx_needs.units["image:1024x1024:high"]


async def test_a_configurations_quality_in_extra_body_prices_a_gpt_image_1_call(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    config = openai_config(fake, model="gpt-image-1", options={"extra_body": {"quality": "medium"}})
    async with ServiceManager(settings(config, tmp_path / "l.sqlite3", max_cost_usd=1.0), host=builtin_only) as m:
        response = await m.generate_image("a cat")
    input_usd = response.usage.input_tokens * 10.0 / 1e6  # gpt-image-1's input, at the image input rate
    assert response.usage.units == {"image:1024x1024:medium": 1.0}
    assert response.usage.cost_usd == pytest.approx(0.042 + input_usd)
    assert fake.received[-1].body["quality"] == "medium"


async def test_a_strict_budget_bounds_a_transcription_by_the_audio_itself(fake: FakeProvider, builtin_only: PluginHost,
                                                                          tmp_path: Path) -> None:
    config = openai_config(fake, model="whisper-1")
    async with ServiceManager(settings(config, tmp_path / "l.sqlite3", max_cost_usd=0.01), host=builtin_only) as m:
        with pytest.raises(BudgetExceededError):
            await m.transcribe(wav(101.0))  # 101 s at 0.0001: over 0.01
        await m.transcribe(wav(99.0))
    assert fake.count(route="transcriptions") == 1


async def test_gpt_4o_transcribe_keeps_its_tokens_within_the_calls_bound(fake: FakeProvider, builtin_only: PluginHost,
                                                                         tmp_path: Path) -> None:
    config = openai_config(fake, model="gpt-4o-transcribe")
    async with ServiceManager(settings(config, tmp_path / "l.sqlite3", max_cost_usd=1.0), host=builtin_only) as m:
        response = await m.transcribe(wav(2.0))
    assert response.usage.output_tokens > 0 and response.usage.units == {"audio_second": 2.0}
    assert response.usage.cost_usd == pytest.approx(0.0002)


def cached(config: ProviderConfig, *operations: str) -> Settings:
    return Settings(configurations={"oa": config}, middleware={"cache": {"operations": list(operations)}})


async def test_a_transcription_listed_for_the_cache_is_served_from_it_the_second_time(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(cached(openai_config(fake, model="whisper-1"), "transcription"),
                              host=builtin_only) as manager:
        first = await manager.transcribe(wav(1.0))
        second = await manager.transcribe(wav(1.0))
        await manager.transcribe(wav(1.0), options={"temperature": 0.5})  # not deterministic: sent
    assert (first.text, second.cached, fake.count(route="transcriptions")) == (second.text, True, 2)


async def test_images_are_made_anew_unless_listed_for_the_cache(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(cached(openai_config(fake, model="dall-e-2")), host=builtin_only) as manager:
        await manager.generate_image("a cat")
        await manager.generate_image("a cat")
    async with ServiceManager(cached(openai_config(fake, model="dall-e-2"), "image"), host=builtin_only) as manager:
        await manager.generate_image("a cat")
        hit = await manager.generate_image("a cat")
    assert hit.cached and hit.images[0].data and fake.count(route="images") == 3


async def test_an_image_of_a_size_without_a_price_is_billed_unknown_with_one_warning(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    async with ServiceManager(settings(openai_config(fake, model="dall-e-3"), ledger), host=builtin_only) as manager:
        for _ in range(2):
            response = await manager.generate_image("a cat", size="512x512")
    assert response.usage.cost_usd is None
    assert [row.billed for row in await rows(ledger)] == ["unknown", "unknown"]
    warned = [r.getMessage() for r in caplog.records if "image:512x512:standard" in r.getMessage()]
    assert len(warned) == 1 and "[configurations.oa.price.units]" in warned[0]


OGG = b"OggS" + bytes(99)  # Opus in Ogg can hold hours of silence in this: no bound


async def test_a_strict_cost_limit_refuses_audio_of_no_known_bound_before_sending(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    config = openai_config(fake, model="whisper-1")
    async with ServiceManager(settings(config, tmp_path / "l.sqlite3", max_cost_usd=1.0), host=builtin_only) as m:
        with pytest.raises(ConfigurationError, match="cannot be known before it is sent: its audio states no duration"):
            await m.transcribe(OGG, filename="a.ogg")
    assert fake.count(route="transcriptions") == 0


async def test_audio_of_no_known_bound_goes_out_without_a_strict_cost_limit(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    config = openai_config(fake, model="whisper-1")
    async with ServiceManager(settings(config, tmp_path / "l.sqlite3"), host=builtin_only) as m:
        await m.transcribe(OGG, filename="a.ogg")
    assert fake.count(route="transcriptions") == 1
