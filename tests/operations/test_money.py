"""The media, rerank and moderation operations under a strict budget and under faults, over real
HTTP: the worst case bounds what is settled, and the ledger holds one row per request the provider
received (the Responses API's: test_responses_budget.py)."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from provmw.config import ProviderConfig
from provmw.errors import BudgetExceededError, ProvmwError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.stores.usage import SqliteUsageStore, UsageRecord
from provmw.testing import FakeProvider, Fault
from tests.budget_sampling import peak_cost_while
from tests.conftest import SENTINEL_KEY, openai_config


def wav(seconds: float, rate: int = 8000) -> bytes:
    """A silent 8-bit mono WAV of ``seconds``."""
    frames = int(seconds * rate)
    header = b"RIFF" + struct.pack("<I", 36 + frames) + b"WAVEfmt " + struct.pack(
        "<IHHIIHH", 16, 1, 1, rate, rate, 1, 8) + b"data" + struct.pack("<I", frames)
    return header + b"\x80" * frames


PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000100ffff03000006000557bfab"
                    "d40000000049454e44ae426082")


@attrs.frozen
class Operation:
    """One operation's call, the fake's route for it, and a configuration priced so that the
    global $1.00 bucket admits a few dozen calls at their worst case."""

    route: str
    call: Callable[[ServiceManager, int], Awaitable[Any]]
    config: Callable[[FakeProvider], ProviderConfig]


def _openai(model: str, price: dict[str, Any], **options: Any) -> Callable[[FakeProvider], ProviderConfig]:
    return lambda fake: openai_config(fake, model=model, price=price, options=options)


OPERATIONS = {
    "image": Operation(
        "images", lambda m, i: m.generate_image(f"a cat {i}", size="1024x1024", quality="standard"),
        _openai("dall-e-3", {"input_usd_per_mtok": 0.0, "units": {"image:1024x1024:standard": 0.02}})),
    "transcription": Operation(
        "transcriptions", lambda m, i: m.transcribe(wav(1.0 + i % 3)),
        _openai("whisper-1", {"input_usd_per_mtok": 0.0, "units": {"audio_second": 0.005}})),
    "speech": Operation(
        "speech", lambda m, i: m.speak(f"hello number {i}"),
        _openai("tts-1", {"input_usd_per_mtok": 0.0, "units": {"character": 0.001}})),
    "rerank": Operation(
        "rerank", lambda m, i: m.rerank(f"query {i}", ["a", "b", "c"]),
        lambda fake: ProviderConfig(identifier="oa", provider="cohere", model="rerank-v3.5", base_url=fake.url,
                                    api_key=SENTINEL_KEY,
                                    price={"input_usd_per_mtok": 0.0, "units": {"search_unit": 0.02}})),
    "moderation": Operation(
        "moderations", lambda m, i: m.moderate(f"text {i}"),
        _openai("omni-moderation-latest", {"input_usd_per_mtok": 10_000.0})),
}


def settings(config: ProviderConfig, ledger: Path, **middleware: Any) -> Settings:
    return Settings(configurations={"oa": config}, middleware={
        "budget": {"path": str(ledger), "limits": [{"scope": "global", "period": "total", "max_cost_usd": 1.0}]},
        "usage": {"path": str(ledger)}, **middleware})


async def records(path: Path) -> list[UsageRecord]:
    store = SqliteUsageStore(path)
    try:
        return await store.records()
    finally:
        await store.aclose()


async def attempt(operation: Operation, manager: ServiceManager, i: int) -> Any:
    try:
        return await operation.call(manager, i)
    except ProvmwError as exc:
        return exc


@pytest.mark.parametrize("name", sorted(OPERATIONS))
async def test_a_strict_budget_race_never_settles_or_reserves_past_its_limit(
        name: str, fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    operation, ledger = OPERATIONS[name], tmp_path / "ledger.sqlite3"
    async with ServiceManager(settings(operation.config(fake), ledger), host=builtin_only) as manager:
        store = manager.state.budget_store()
        outcomes, peak = await peak_cost_while(
            store, asyncio.gather(*(attempt(operation, manager, i) for i in range(200))))
        [bucket] = await store.states(now=time.time())
    served = [o for o in outcomes if not isinstance(o, BaseException)]
    assert served and any(isinstance(o, BudgetExceededError) for o in outcomes)
    assert peak <= 1_000_000 and bucket.reserved.cost_micro_usd == 0
    rows = await records(ledger)
    assert len(rows) == len(served) == fake.count(operation.route)
    assert all(r.cost_usd is not None and r.billed == "yes" for r in rows)
    assert bucket.spent.cost_micro_usd >= round(sum(r.cost_usd or 0 for r in rows) * 1e6)


@pytest.mark.parametrize("name", sorted(OPERATIONS))
async def test_under_faults_the_ledger_holds_one_row_per_request_received(
        name: str, fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    operation, ledger = OPERATIONS[name], tmp_path / "ledger.sqlite3"
    fake.fail_randomly(0.3, Fault(status=500), route=operation.route, seed=7)
    config = attrs.evolve(operation.config(fake), price=None)
    unlimited = Settings(configurations={"oa": config}, middleware={
        "usage": {"path": str(ledger)}, "retry": {"base_s": 0.001, "max_wait_s": 0.01},
        "circuit_breaker": {"enabled": False}})  # on, it stops the retries this test counts
    async with ServiceManager(unlimited, host=builtin_only) as manager:
        outcomes = await asyncio.gather(*(attempt(operation, manager, i) for i in range(40)))
    rows = await records(ledger)
    assert len(rows) == fake.count(operation.route) > len(outcomes)  # retries made more requests than calls
    assert sum(r.status == "ok" for r in rows) == sum(not isinstance(o, BaseException) for o in outcomes)
