"""The stream fault matrix over real HTTP: every fault before the first chunk is retried or
failed over, every fault after it is a typed error, and each attempt leaves one ledger record,
its budget settled and its breaker told."""

from __future__ import annotations

import asyncio
import gc
import math
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from provmw.errors import (
    FirstChunkTimeoutError,
    MalformedResponseError,
    ProviderConnectionError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    StreamInterruptedError,
)
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.responses import ChatChunk
from provmw.settings import Settings
from provmw.stores.usage import SqliteUsageStore, UsageRecord
from provmw.testing import FakeProvider, Fault
from tests.conftest import anthropic_config, openai_config
from tests.middleware.test_budget_attempts import reservation

PRICE = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0, "max_output_tokens": 1000}
LIMITS = {"first_chunk_timeout_s": 0.3, "stream_idle_timeout_s": 0.3, "price": PRICE}

BEFORE_FIRST_CHUNK = {
    "status-503": Fault(status=503),
    "in-band-error": Fault(stream_error_after=0, code="server_error"),
    "in-band-error-after-the-role-event": Fault(stream_error_after=1, code="server_error"),
    "stall": Fault(stall_after=0, stall_s=2),
    "stall-with-keepalives": Fault(stall_after=0, stall_s=2, keepalive_s=0.05),
    "cut": Fault(cut_stream_after=0),
    "malformed": Fault(malformed_after=0),
}
AFTER_FIRST_CHUNK = {
    "in-band-error": (Fault(stream_error_after=3, code="server_error"), ProviderUnavailableError),
    "stall": (Fault(stall_after=3, stall_s=2), ProviderTimeoutError),
    "stall-with-keepalives": (Fault(stall_after=3, stall_s=2, keepalive_s=0.05), ProviderTimeoutError),
    "cut": (Fault(cut_stream_after=3), ProviderConnectionError),
    "malformed": (Fault(malformed_after=3), MalformedResponseError),
}


def settings(fake: FakeProvider, ledger: Path, primary: str = "oa") -> Settings:
    return Settings(
        configurations={"oa": openai_config(fake, fallbacks=("an",) if primary == "oa" else (), **LIMITS),
                        "an": anthropic_config(fake, fallbacks=("oa",) if primary == "an" else (), **LIMITS)},
        default=primary,
        middleware={"retry": {"base_s": 0.001, "max_wait_s": 0.01, "max_attempts": 2},
                    "circuit_breaker": {"window_size": 2, "min_calls": 2},
                    "budget": {"path": str(ledger), "limits": [{"scope": "global", "max_cost_usd": 10.0}]},
                    "usage": {"path": str(ledger)}})


@pytest.fixture
async def manager(fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> AsyncIterator[ServiceManager]:
    async with ServiceManager(settings(fake, tmp_path / "ledger.sqlite3"), host=builtin_only) as manager:
        yield manager


async def ledger(path: Path) -> list[UsageRecord]:
    store = SqliteUsageStore(path)
    found = await store.records()
    await store.aclose()
    return sorted(found, key=lambda r: r.attempt)


def spend(records: list[UsageRecord], each: int) -> int:
    """What a strict bucket settles for these attempts (ADR 0040): answers at their cost, rounded up,
    and each attempt that may have been billed (``unknown``) at its reservation, ``each``."""
    answered = math.ceil(round(sum(r.cost_usd or 0 for r in records) * 1e6, 3))
    return answered + each * sum(r.billed == "unknown" for r in records)


async def budget_of(manager: ServiceManager) -> tuple[int, int]:
    [bucket] = await manager.state.budget_store().states(now=time.time())
    return bucket.spent.cost_micro_usd, bucket.reserved.cost_micro_usd


@pytest.mark.parametrize("fault", BEFORE_FIRST_CHUNK.values(), ids=BEFORE_FIRST_CHUNK.keys())
async def test_a_fault_before_the_first_chunk_is_retried_then_failed_over(
        manager: ServiceManager, fake: FakeProvider, tmp_path: Path, fault: Fault) -> None:
    fake.script(fault, fault, model="gpt-test")
    chunks = [c async for c in manager.stream_chat("stream me", user="ada")]
    assert "".join(c.text for c in chunks).strip() == "echo: stream me"
    assert (fake.count(model="gpt-test"), fake.count(model="claude-test")) == (2, 1)
    spent, reserved = await budget_of(manager)
    await manager.aclose()
    records = await ledger(tmp_path / "ledger.sqlite3")
    assert [(r.config_id, r.status) for r in records] == [("oa", "error"), ("oa", "error"), ("an", "ok")]
    assert (reserved, spent) == (0, spend(records, reservation(manager, "stream me", stream=True)))


@pytest.mark.parametrize("fault", BEFORE_FIRST_CHUNK.values(), ids=BEFORE_FIRST_CHUNK.keys())
async def test_failures_before_the_first_chunk_open_the_breaker(manager: ServiceManager, fake: FakeProvider,
                                                                fault: Fault) -> None:
    fake.script(fault, fault, model="gpt-test")
    _ = [c async for c in manager.stream_chat("stream me")]
    await manager.chat("and now?")
    assert fake.count(model="gpt-test") == 2  # open: the next call went straight to the fallback


@pytest.mark.parametrize(("fault", "cause"), AFTER_FIRST_CHUNK.values(), ids=AFTER_FIRST_CHUNK.keys())
async def test_a_fault_after_the_first_chunk_is_a_typed_interruption_and_never_a_splice(
        manager: ServiceManager, fake: FakeProvider, fault: Fault, cause: type[Exception]) -> None:
    fake.script(fault, model="gpt-test")
    received: list[ChatChunk] = []

    async def read() -> None:
        async for chunk in manager.stream_chat("one two three four"):
            received.append(chunk)

    with pytest.raises(StreamInterruptedError) as caught:
        await read()
    assert isinstance(caught.value.__cause__, cause)
    assert "".join(c.text for c in received) == "echo: one "
    assert (fake.count(model="gpt-test"), fake.count(model="claude-test")) == (1, 0)


@pytest.mark.parametrize(("fault", "cause"), AFTER_FIRST_CHUNK.values(), ids=AFTER_FIRST_CHUNK.keys())
async def test_an_interrupted_stream_leaves_one_estimated_record_and_settles_its_budget(
        manager: ServiceManager, fake: FakeProvider, tmp_path: Path, fault: Fault, cause: type[Exception]) -> None:
    fake.script(fault, model="gpt-test")
    with pytest.raises(StreamInterruptedError):
        _ = [c async for c in manager.stream_chat("one two three four")]
    spent, reserved = await budget_of(manager)
    await manager.aclose()
    [record] = await ledger(tmp_path / "ledger.sqlite3")
    assert (record.status, record.error_type, record.billed) == ("error", cause.__name__, "estimated")
    assert (reserved, spent) == (0, round((record.cost_usd or 0) * 1e6))


@pytest.mark.parametrize(("fault", "cause"), AFTER_FIRST_CHUNK.values(), ids=AFTER_FIRST_CHUNK.keys())
async def test_failures_after_the_first_chunk_open_the_breaker(manager: ServiceManager, fake: FakeProvider,
                                                               fault: Fault, cause: type[Exception]) -> None:
    fake.script(fault, fault, model="gpt-test")
    for _ in range(2):
        with pytest.raises(StreamInterruptedError):
            _ = [c async for c in manager.stream_chat("one two three four")]
    await manager.chat("and now?")
    assert fake.count(model="gpt-test") == 2


async def test_a_completed_stream_is_recorded_with_the_reported_usage(
        manager: ServiceManager, fake: FakeProvider, tmp_path: Path) -> None:
    chunks = [c async for c in manager.stream_chat("stream me", user="ada", tenant="acme")]
    usage = chunks[-1].usage
    assert usage is not None and usage.cost_usd is not None
    await manager.aclose()
    [record] = await ledger(tmp_path / "ledger.sqlite3")
    assert (record.user, record.tenant, record.billed) == ("ada", "acme", "yes")
    assert (record.input_tokens, record.output_tokens, record.cost_usd) == (
        usage.input_tokens, usage.output_tokens, usage.cost_usd)


async def test_a_caller_who_stops_reading_leaves_one_estimated_record_and_no_reservation(
        manager: ServiceManager, fake: FakeProvider, tmp_path: Path) -> None:
    stream = manager.stream_chat("one two three four")
    async for _ in stream:
        break
    await stream.aclose()
    spent, reserved = await budget_of(manager)
    await manager.aclose()
    [record] = await ledger(tmp_path / "ledger.sqlite3")
    assert (record.status, record.billed) == ("ok", "estimated")
    assert (reserved, spent) == (0, round((record.cost_usd or 0) * 1e6))


async def test_a_stream_that_never_starts_times_out_as_a_first_chunk_timeout(
        manager: ServiceManager, fake: FakeProvider) -> None:
    fake.script(Fault(stall_after=0, stall_s=2), Fault(stall_after=0, stall_s=2))  # the retry's too
    with pytest.raises(FirstChunkTimeoutError, match="first_chunk_timeout_s"):
        _ = [c async for c in manager.stream_chat("x", configuration="an")]


async def test_per_call_controls_set_the_first_chunk_limit(manager: ServiceManager, fake: FakeProvider) -> None:
    fake.script(Fault(stall_after=0, stall_s=0.5))
    chunks = [c async for c in manager.stream_chat("x", configuration="an",
                                                    controls={"first_chunk_timeout_s": 2.0})]
    assert "".join(c.text for c in chunks).strip() == "echo: x"


async def test_streamed_tool_calls_come_whole_once_each(manager: ServiceManager, fake: FakeProvider) -> None:
    from provmw.messages import ToolSpec

    for configuration in ("oa", "an"):
        chunks = [c async for c in manager.stream_chat_with_tools("Paris\nRome\nOslo", [ToolSpec(name="weather")],
                                                                  configuration=configuration)]
        calls = [call for c in chunks for call in c.tool_calls]
        assert [(c.name, c.parsed_arguments()) for c in calls] == [
            ("weather", {"query": "Paris"}), ("weather", {"query": "Rome"}), ("weather", {"query": "Oslo"})]
        assert len({c.id for c in calls}) == 3


async def test_the_stream_asks_for_the_final_usage_event(manager: ServiceManager, fake: FakeProvider) -> None:
    _ = [c async for c in manager.stream_chat("x")]
    assert fake.received[-1].body["stream_options"] == {"include_usage": True}


async def test_stream_chat_takes_user_and_tenant_like_chat(manager: ServiceManager, fake: FakeProvider) -> None:
    chunks = [c async for c in manager.stream_chat("x", user="ada", tenant="acme", controls={"deadline_s": 5})]
    assert chunks[-1].finish_reason == "stop"


async def test_a_caller_who_breaks_without_closing_still_leaves_its_record(
        manager: ServiceManager, fake: FakeProvider, tmp_path: Path) -> None:
    async for _ in manager.stream_chat("one two three four"):
        break  # the dropped iterator is closed by the event loop's finalizer
    gc.collect()
    await asyncio.sleep(0.05)
    await manager.aclose()
    assert [r.billed for r in await ledger(tmp_path / "ledger.sqlite3")] == ["estimated"]


class DropsTheStream:
    """An outer layer that fails after the stream opened, so the stream never reaches the caller."""

    name, priority = "drops_the_stream", 990

    async def handle(self, ctx: Any, config: Any, next: Any) -> Any:
        await next(config)
        raise RuntimeError("an outer layer failed")


async def test_a_stream_an_outer_layer_drops_still_ends_once(fake: FakeProvider, builtin_only: PluginHost,
                                                               tmp_path: Path) -> None:
    async with ServiceManager(settings(fake, tmp_path / "ledger.sqlite3"), host=builtin_only,
                              middleware=[DropsTheStream()]) as manager:
        with pytest.raises(RuntimeError, match="an outer layer failed"):
            _ = [c async for c in manager.stream_chat("one two three")]
        spent, reserved = await budget_of(manager)
    [record] = await ledger(tmp_path / "ledger.sqlite3")
    assert (record.billed, reserved, spent) == ("estimated", 0, round((record.cost_usd or 0) * 1e6))


ANTHROPIC_BEFORE_FIRST_CHUNK = {
    "status-529": Fault(status=529, code="overloaded_error"),
    "overloaded-event-before-message-start": Fault(stream_error_after=0, code="overloaded_error"),
    "overloaded-event-after-message-start": Fault(stream_error_after=1, code="overloaded_error"),
    "stall": Fault(stall_after=1, stall_s=2),
    "cut": Fault(cut_stream_after=2),
    "malformed": Fault(malformed_after=1),
}


@pytest.mark.parametrize("fault", ANTHROPIC_BEFORE_FIRST_CHUNK.values(), ids=ANTHROPIC_BEFORE_FIRST_CHUNK.keys())
async def test_an_anthropic_stream_that_fails_before_its_first_chunk_is_retried_then_failed_over(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path, fault: Fault) -> None:
    fake.script(fault, fault, model="claude-test")
    async with ServiceManager(settings(fake, tmp_path / "ledger.sqlite3", primary="an"), host=builtin_only) as manager:
        chunks = [c async for c in manager.stream_chat("stream me", user="ada")]
        spent, reserved = await budget_of(manager)
        each = reservation(manager, "stream me", stream=True)
    assert "".join(c.text for c in chunks).strip() == "echo: stream me"
    records = await ledger(tmp_path / "ledger.sqlite3")
    assert [(r.config_id, r.status) for r in records] == [("an", "error"), ("an", "error"), ("oa", "ok")]
    assert (reserved, spent) == (0, spend(records, each))


async def test_the_usage_event_the_provider_sends_is_what_the_ledger_and_budget_count(
        manager: ServiceManager, fake: FakeProvider, tmp_path: Path) -> None:
    fake.script(Fault(usage={"prompt_tokens": 700, "completion_tokens": 300, "total_tokens": 1000}))
    chunks = [c async for c in manager.stream_chat("stream me")]
    spent, reserved = await budget_of(manager)
    await manager.aclose()
    [record] = await ledger(tmp_path / "ledger.sqlite3")
    assert (record.input_tokens, record.output_tokens, record.billed) == (700, 300, "yes")
    assert chunks[-1].usage is not None and chunks[-1].usage.cost_usd == record.cost_usd
    assert (reserved, spent) == (0, round((record.cost_usd or 0) * 1e6))


async def test_a_cancelled_reader_leaves_one_estimated_record_and_no_reservation(
        manager: ServiceManager, fake: FakeProvider, tmp_path: Path) -> None:
    fake.script(Fault(stall_after=3, stall_s=0.25))
    started = asyncio.Event()

    async def read() -> None:
        async for _ in manager.stream_chat("one two three four"):
            started.set()

    reader = asyncio.create_task(read())
    await started.wait()
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    spent, reserved = await budget_of(manager)
    await manager.aclose()
    [record] = await ledger(tmp_path / "ledger.sqlite3")
    assert (record.billed, reserved, spent) == ("estimated", 0, round((record.cost_usd or 0) * 1e6))


async def test_closing_the_manager_ends_the_streams_still_open(
        manager: ServiceManager, fake: FakeProvider, tmp_path: Path) -> None:
    stream = manager.stream_chat("one two three four")
    await anext(stream)
    await manager.aclose()
    await stream.aclose()
    assert [r.billed for r in await ledger(tmp_path / "ledger.sqlite3")] == ["estimated"]


async def test_an_estimate_never_settles_past_the_bound_a_strict_budget_reserved(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    price = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 1000.0, "max_output_tokens": 1000}
    config = openai_config(fake, price=price, options={"max_tokens": 3})
    limits = [{"scope": "global", "period": "total", "max_cost_usd": 1.0}]
    path = tmp_path / "ledger.sqlite3"
    middleware = {"budget": {"path": str(path), "limits": limits}, "usage": {"path": str(path)}}
    async with ServiceManager(Settings(configurations={"oa": config}, middleware=middleware),
                              host=builtin_only) as manager:
        stream = manager.stream_chat(("x" * 4000 + " ") * 2)  # the fake echoes it: 3 tokens, 8,000 characters
        texts = [(await anext(stream)).text for _ in range(3)]
        await stream.aclose()  # before the usage event: the usage is estimated from the text
        spent, reserved = await budget_of(manager)
    [record] = await ledger(path)
    assert len("".join(texts)) > 8000 and record.billed == "estimated"
    assert record.output_tokens <= 3 and spent <= 1_000_000 and reserved == 0
