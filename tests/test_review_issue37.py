"""What a hostile review of the operations beyond chat found, one test per bug, each fixed since:
budgets overspent by what a provider reports past the worst case (seconds, images, search units,
tokens, stored conversations, built-in tool fees), follow-ups moved out of the pool or configuration
they name, options slipping past the cache rule, and the guard's placeholders in continued
conversations and image answers."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from provmw.config import ProviderConfig
from provmw.errors import (
    BudgetExceededError,
    ConfigurationError,
    GuardRefusedError,
    MalformedResponseError,
    ProvmwError,
)
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.pools import Pool
from provmw.settings import Settings
from provmw.stores.usage import SqliteUsageStore
from provmw.testing import FakeProvider, Fault, wav
from tests.conftest import SENTINEL_KEY, openai_config
from tests.hostile import HostileProvider

LIMIT_USD = 0.01




def strict(configs: dict[str, ProviderConfig], ledger: Path, limit_usd: float = LIMIT_USD, **more: Any) -> Settings:
    """One global strict bucket of ``limit_usd``, and the ledger."""
    return Settings(configurations=configs, middleware={
        "budget": {"path": str(ledger), "limits": [{"scope": "global", "period": "total",
                                                     "max_cost_usd": limit_usd}]},
        "usage": {"path": str(ledger)}, "retry": {"enabled": False}, **more})


async def billed_usd(ledger: Path) -> float:
    """What the ledger says the provider billed (the budget's own books clamp a settle at the
    reservation, so they hide an overspend: the ledger does not)."""
    store = SqliteUsageStore(ledger)
    try:
        return sum(r.cost_usd or 0.0 for r in await store.records())
    finally:
        await store.aclose()


# --- a worst case below what is then billed (strict budget overspent) ------------------------


async def test_a_transcription_never_settles_more_seconds_than_it_reserved(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    config = openai_config(fake, model="whisper-1", price={"input_usd_per_mtok": 0.0,
                                                           "units": {"audio_second": LIMIT_USD}})
    fake.script(Fault(usage={"type": "duration", "seconds": 2}), route="transcriptions")
    async with ServiceManager(strict({"oa": config}, tmp_path / "l.sqlite3"), host=builtin_only) as manager:
        with pytest.raises(MalformedResponseError, match="2 seconds"):  # more than the audio lasts: refused
            await manager.transcribe(wav(1.0))  # reserved: 1 s at $0.01, the whole bucket
    assert await billed_usd(tmp_path / "l.sqlite3") <= LIMIT_USD


async def test_an_image_answer_cannot_bill_a_dearer_size_and_quality_than_asked(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    config = openai_config(fake, model="gpt-image-1")
    fake.script(Fault(replace={"1024x1024": "1536x1024", "low": "high"}), route="images")
    async with ServiceManager(strict({"oa": config}, tmp_path / "l.sqlite3", limit_usd=0.05),
                              host=builtin_only) as manager:
        with pytest.raises(MalformedResponseError, match="size"):  # another size than asked: refused
            await manager.generate_image("a cat", size="1024x1024", quality="low")  # $0.011 reserved
    assert await billed_usd(tmp_path / "l.sqlite3") <= 0.05


async def test_a_rerank_answer_cannot_bill_more_search_units_than_its_worst_case(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    config = ProviderConfig(identifier="co", provider="cohere", model="rerank-v3.5", base_url=fake.url,
                            api_key=SENTINEL_KEY)
    fake.script(Fault(usage={"search_units": 1000}), route="rerank")
    async with ServiceManager(strict({"co": config}, tmp_path / "l.sqlite3"), host=builtin_only) as manager:
        with pytest.raises(MalformedResponseError, match="search_units"):  # fixed: more than its worst case
            await manager.rerank("cats", ["a cat", "a dog"])  # 1 search unit at worst: $0.002
    assert await billed_usd(tmp_path / "l.sqlite3") <= LIMIT_USD


async def test_a_continued_response_never_settles_past_a_strict_limit(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    price = {"input_usd_per_mtok": 10.0, "output_usd_per_mtok": 10.0}
    config = openai_config(fake, price=price, options={"max_tokens": 50})
    async with ServiceManager(strict({"oa": config}, tmp_path / "l.sqlite3"), host=builtin_only) as manager:
        first = await manager.respond("x " * 100, store=True)
        # OpenAI bills the stored conversation again as this call's input: 200,000 tokens here
        fake.script(Fault(usage={"input_tokens": 200_000, "output_tokens": 5, "total_tokens": 200_005}),
                    route="responses")
        with pytest.raises(ConfigurationError):  # fixed: its worst case is unknown, refused before it is sent
            await manager.respond("and then?", previous_response_id=first.response_id)
    assert await billed_usd(tmp_path / "l.sqlite3") <= LIMIT_USD


# --- a Responses follow-up routed to the configuration that made it -------------------------


def pooled(fake: FakeProvider, ledger: Path) -> Settings:
    """Pool "gpt" of deployments a and b, and a strict bucket of one request for the pool."""
    configs = {m: openai_config(fake, identifier=m, model=f"dep-{m}") for m in ("a", "b")}
    return Settings(configurations=configs, pools={"gpt": Pool(name="gpt", members=("a", "b"), strategy="order")},
                    default="gpt", middleware={"budget": {"path": str(ledger), "limits": [
                        {"scope": "configuration", "match": "gpt", "period": "total", "max_requests": 1}]}})


async def test_a_follow_up_on_a_pool_still_counts_against_the_pools_budget(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    async with ServiceManager(pooled(fake, tmp_path / "l.sqlite3"), host=builtin_only) as manager:
        first = await manager.respond("hello", store=True, configuration="gpt")
        with pytest.raises(BudgetExceededError):  # the pool's one request is spent
            await manager.respond("again", previous_response_id=first.response_id, configuration="gpt")


async def test_a_follow_up_naming_another_configuration_is_not_sent_with_the_first_ones_key(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    configs = {"a": openai_config(fake, identifier="a", api_key="sk-tenant-a-key"),
               "b": openai_config(fake, identifier="b", api_key="sk-tenant-b-key")}
    async with ServiceManager(Settings(configurations=configs, default="a"), host=builtin_only) as manager:
        first = await manager.respond("my secret plans", store=True, configuration="a", tenant="A")
        with contextlib.suppress(ProvmwError):  # refused: fine
            await manager.respond("repeat what I said", previous_response_id=first.response_id,
                                  configuration="b", tenant="B")
    assert "sk-tenant-a-key" not in fake.received[-1].headers.get("Authorization", "")


async def test_a_streamed_stored_response_can_be_continued(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(Settings(configurations={"oa": openai_config(fake)}), host=builtin_only) as manager:
        chunks = [c async for c in manager.stream_respond("hello", store=True)]
    assert any(getattr(c, "response_id", None) for c in chunks)


# --- transcription of non-WAV audio -----------------------------------------------------------


def _crc(data: bytes, poly: int, bits: int) -> int:
    crc, top, mask = 0, 1 << (bits - 1), (1 << bits) - 1
    for byte in data:
        crc ^= byte << (bits - 8)
        for _ in range(8):
            crc = ((crc << 1) ^ poly if crc & top else crc << 1) & mask
    return crc


def silent_flac(seconds: int, rate: int = 8000, block: int = 64_000) -> bytes:
    """A valid FLAC file of ``seconds`` of digital silence (mono, 16-bit): STREAMINFO, then one frame
    of a CONSTANT subframe per block, each with its CRC-8 and CRC-16, as a lossless encoder writes it."""
    samples = seconds * rate
    assert samples % block == 0
    # min and max block size, min and max frame size (0: unknown); rate, channels - 1, bits - 1, samples; MD5
    info = block.to_bytes(2, "big") * 2 + bytes(6) + (rate << 44 | 0 << 41 | 15 << 36 | samples).to_bytes(8, "big") \
        + bytes(16)
    out = [b"fLaC", bytes([0x80, 0, 0, 34]), info]
    for number in range(samples // block):
        header = b"\xff\xf8" + bytes([0x74, 0x08]) + chr(number).encode() + (block - 1).to_bytes(2, "big")
        header += bytes([_crc(header, 0x07, 8)])
        frame = header + b"\x00\x00\x00"  # subframe: CONSTANT, no wasted bits; the value 0
        out.append(frame + _crc(frame, 0x8005, 16).to_bytes(2, "big"))
    return b"".join(out)


def test_the_seconds_bound_of_a_flac_file_is_never_below_its_duration() -> None:
    from provmw.operations.audio import TranscriptionRequest

    flac = silent_flac(3600)
    assert int.from_bytes(flac[18:26], "big") & (1 << 36) - 1 == 3600 * 8000  # STREAMINFO: an hour
    assert TranscriptionRequest(audio=flac, filename="meeting.flac").most_units({})["audio_second"] >= 3600


# --- the guard plugin on the new operations ---------------------------------------------------


def guarded(fake: FakeProvider, model: str = "gpt-test") -> ServiceManager:
    settings = Settings(configurations={"main": openai_config(fake, identifier="main", model=model)}, default="main",
                        middleware={"guard": {}})
    return ServiceManager(settings, host=PluginHost(PluginPolicy(allow=("guard",)), environ={}))


async def test_a_continued_conversation_never_reuses_a_placeholder_for_another_value(fake: FakeProvider) -> None:
    # The guard refuses to redact a turn of a stored conversation (its earlier placeholders were numbered by
    # other calls): nothing goes out with a placeholder that could name another value there.
    async with guarded(fake) as manager:
        first = await manager.respond("write to ada@example.com", store=True)
        with pytest.raises(GuardRefusedError, match="redact:stored_conversation"):
            await manager.respond("and cc bob@example.com", previous_response_id=first.response_id)
        await manager.respond("thanks", previous_response_id=first.response_id)  # nothing to redact: sent
    assert fake.count(route="responses") == 2


async def test_an_images_revised_prompt_comes_back_restored(fake: FakeProvider) -> None:
    async with guarded(fake, model="dall-e-3") as manager:
        answer = await manager.generate_image("a portrait of ada@example.com")
    assert answer.images[0].revised_prompt == "a picture of a portrait of ada@example.com"


# --- extra_body on the Responses wire ---------------------------------------------------------


async def test_extra_body_cannot_raise_a_responses_calls_output_bound(fake: FakeProvider,
                                                                      builtin_only: PluginHost) -> None:
    config = openai_config(fake, options={"max_tokens": 10})
    async with ServiceManager(Settings(configurations={"oa": config}), host=builtin_only) as manager:
        with contextlib.suppress(ProvmwError):  # refused: fine
            await manager.respond("hi", options={"extra_body": {"max_output_tokens": 5000}})
    assert all(r.body.get("max_output_tokens", 10) <= 10 for r in fake.received)


async def test_a_call_continuing_a_stored_response_through_extra_body_is_never_cached(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    settings = Settings(configurations={"oa": openai_config(fake)}, middleware={"cache": {"operations": ["responses"]}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        first = await manager.respond("hi", store=True)
        asked = {"temperature": 0, "extra_body": {"previous_response_id": first.response_id}}
        for _ in range(2):  # fixed: refused each time, so never answered from the cache
            with pytest.raises(ConfigurationError, match="previous_response_id"):
                await manager.respond("go on", options=asked)
    assert len(fake.received) == 1


async def test_a_token_priced_rerank_never_settles_past_its_worst_case(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    config = ProviderConfig(identifier="vo", provider="cohere", model="rerank-2", base_url=fake.url,
                            api_key=SENTINEL_KEY, price={"input_usd_per_mtok": 1.0, "units": {"search_unit": 0.0}})
    query, documents = "what does the contract say about termination? " * 20, [f"clause {i}" for i in range(50)]
    billed = len(query) // 4 * len(documents) + sum(len(d) // 4 + 1 for d in documents)  # Voyage's rule, ~4 B/token
    fake.script(Fault(usage={"input_tokens": billed}), route="rerank")
    async with ServiceManager(strict({"vo": config}, tmp_path / "l.sqlite3", limit_usd=0.005),
                              host=builtin_only) as manager:
        # fixed: the bound is Voyage's rule (~48,000 tokens, $0.048), so the call is refused before it is sent
        with pytest.raises(BudgetExceededError):
            await manager.rerank(query, documents)
    assert await billed_usd(tmp_path / "l.sqlite3") <= 0.005


async def test_a_responses_call_whose_seed_the_wire_drops_is_not_cached(fake: FakeProvider,
                                                                         builtin_only: PluginHost) -> None:
    settings = Settings(configurations={"oa": openai_config(fake)}, middleware={"cache": {"operations": ["responses"]}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        answers = [await manager.respond("write a poem", options={"seed": 7}) for _ in range(2)]
    assert "seed" in fake.received[0].body or not answers[1].cached


async def test_a_transcription_filename_with_a_line_break_is_a_typed_error(fake: FakeProvider,
                                                                           builtin_only: PluginHost) -> None:
    settings = Settings(configurations={"w": openai_config(fake, identifier="w", model="whisper-1")})
    async with ServiceManager(settings, host=builtin_only) as manager:
        with pytest.raises(ProvmwError):
            await manager.transcribe(wav(1.0), filename="a.wav\r\nX-Injected: 1")


async def test_a_web_search_calls_fee_is_in_its_cost(hostile: HostileProvider, builtin_only: PluginHost) -> None:
    searches = [{"type": "web_search_call", "id": f"ws_{i}", "status": "completed",
                 "action": {"type": "search", "query": "weather"}} for i in range(2)]
    message = {"type": "message", "id": "msg_1", "role": "assistant",
               "content": [{"type": "output_text", "text": "sunny", "annotations": []}]}
    hostile.answer(json.dumps({"id": "resp_1", "status": "completed", "model": "gpt-4o",
                               "output": [*searches, message], "usage": {"input_tokens": 10, "output_tokens": 2}}))
    # the bundled price of gpt-4o, which names the tools' fees (a configuration's own price names its own units)
    config = ProviderConfig(identifier="oa", provider="openai", model="gpt-4o", base_url=hostile.openai_base_url,
                            api_key=SENTINEL_KEY)
    async with ServiceManager(Settings(configurations={"oa": config}), host=builtin_only) as manager:
        answer = await manager.respond("weather in Paris?", builtin_tools=["web_search"])
    assert (answer.usage.cost_usd or 0.0) >= 2 * 10.0 / 1000  # two searches at $10 per 1,000 at least
