"""The stream fault matrix for Responses streams (``stream_respond``): every fault before the first chunk
on OpenAI's Responses wire is retried, then failed over to Anthropic's chat stream; every fault after it
is a typed interruption; each attempt leaves one ledger record and nothing stays reserved."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from provmw.errors import (
    MalformedResponseError,
    ProviderConnectionError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    StreamInterruptedError,
)
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.responses import ChatChunk
from provmw.testing import FakeProvider, Fault
from tests.test_stream_faults import BEFORE_FIRST_CHUNK, budget_of, ledger, settings

# The Responses wire's first text comes in its fifth event (created, in_progress, the item and its part
# first): these faults come after two pieces of text.
AFTER_FIRST_CHUNK = {
    "in-band-error": (Fault(stream_error_after=6, code="server_error"), ProviderUnavailableError),
    "stall": (Fault(stall_after=6, stall_s=2), ProviderTimeoutError),
    "stall-with-keepalives": (Fault(stall_after=6, stall_s=2, keepalive_s=0.05), ProviderTimeoutError),
    "cut": (Fault(cut_stream_after=6), ProviderConnectionError),
    "malformed": (Fault(malformed_after=6), MalformedResponseError),
}


@pytest.fixture
async def manager(fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> AsyncIterator[ServiceManager]:
    async with ServiceManager(settings(fake, tmp_path / "ledger.sqlite3"), host=builtin_only) as manager:
        yield manager


@pytest.mark.parametrize("fault", BEFORE_FIRST_CHUNK.values(), ids=BEFORE_FIRST_CHUNK.keys())
async def test_a_fault_before_the_first_chunk_is_retried_then_failed_over(
        manager: ServiceManager, fake: FakeProvider, tmp_path: Path, fault: Fault) -> None:
    fake.script(fault, fault, route="responses")
    chunks = [c async for c in manager.stream_respond("stream me", user="ada")]
    assert "".join(c.text for c in chunks).strip() == "echo: stream me"
    assert (fake.count(route="responses"), fake.count(route="messages")) == (2, 1)
    _, reserved = await budget_of(manager)
    await manager.aclose()
    records = await ledger(tmp_path / "ledger.sqlite3")
    assert [(r.config_id, r.status) for r in records] == [("oa", "error"), ("oa", "error"), ("an", "ok")]
    assert reserved == 0


@pytest.mark.parametrize(("fault", "cause"), AFTER_FIRST_CHUNK.values(), ids=AFTER_FIRST_CHUNK.keys())
async def test_a_fault_after_the_first_chunk_is_a_typed_interruption_with_one_record(
        manager: ServiceManager, fake: FakeProvider, tmp_path: Path, fault: Fault, cause: type[Exception]) -> None:
    fake.script(fault, route="responses")
    received: list[ChatChunk] = []

    async def read() -> None:
        async for chunk in manager.stream_respond("one two three four"):
            received.append(chunk)

    with pytest.raises(StreamInterruptedError) as caught:
        await read()
    assert isinstance(caught.value.__cause__, cause)
    assert "".join(c.text for c in received).startswith("echo: ")
    assert (fake.count(route="responses"), fake.count(route="messages")) == (1, 0)
    _, reserved = await budget_of(manager)
    await manager.aclose()
    [record] = await ledger(tmp_path / "ledger.sqlite3")
    assert (record.status, record.error_type, record.billed, reserved) == ("error", cause.__name__, "estimated", 0)
