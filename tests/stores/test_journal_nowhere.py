"""The store down and the spill file unwritable (a full disk, a read-only folder): a record is held
until one of them takes it; fail_closed callers wait and new calls are refused, fail_open losses
are bounded, counted and booked."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from provmw.errors import UsageLedgerUnavailableError
from provmw.stores.usage.journal import UsageJournal
from provmw.stores.usage.spill import SpillFile
from tests.stores.test_journal import LockedLedger, spilled_keys
from tests.stores.test_usage_store import record


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[LockedLedger]:
    ledger = LockedLedger(tmp_path / "ledger.db")
    yield ledger
    ledger.unlock()


class Probes:
    """The journal's probe sleep, released one probe at a time by the test."""

    def __init__(self) -> None:
        self.go = asyncio.Event()

    async def sleep(self, delay_s: float) -> None:
        await self.go.wait()
        self.go.clear()


def unwritable(ledger: Path) -> SpillFile:
    """A spill file in a folder that does not exist yet: every append fails until ``writable``."""
    return SpillFile(ledger.parent / "gone" / f"{ledger.name}.spill")


def writable(spill: SpillFile) -> None:
    spill.path.parent.mkdir()


async def settled(predicate: Callable[[], bool], probes: Probes) -> None:
    for _ in range(200):  # bounded: a probe at a time until the journal got there
        if predicate():
            return
        probes.go.set()
        await asyncio.sleep(0.001)
    raise AssertionError("the journal never got there")


def journal(locked: LockedLedger, probes: Probes, **options: object) -> UsageJournal:
    return UsageJournal(locked.store(), spill=unwritable(locked.path), sleep=probes.sleep, **options)  # type: ignore[arg-type]


async def test_fail_closed_waits_until_the_record_is_durable_somewhere(locked: LockedLedger) -> None:
    probes = Probes()
    ledger = journal(locked, probes, policy="fail_closed")
    waiter: Awaitable[str] = asyncio.ensure_future(ledger.durable(record("a")))
    await settled(lambda: ledger.held == 1, probes)
    assert not waiter.done()  # type: ignore[attr-defined]
    writable(ledger.spill)  # type: ignore[arg-type]
    await settled(lambda: waiter.done(), probes)  # type: ignore[attr-defined]
    assert await waiter == "spilled" and ledger.lost == 0
    await ledger.aclose()


async def test_fail_closed_refuses_new_calls_while_records_have_nowhere_to_go(locked: LockedLedger) -> None:
    probes = Probes()
    ledger = journal(locked, probes, policy="fail_closed")
    waiter = asyncio.ensure_future(ledger.durable(record("a")))
    await settled(lambda: ledger.held == 1, probes)
    with pytest.raises(UsageLedgerUnavailableError, match="nor the spill file takes records"):
        ledger.admit()
    writable(ledger.spill)  # type: ignore[arg-type]
    await settled(waiter.done, probes)
    ledger.admit()
    await ledger.aclose()


async def test_a_held_record_goes_to_the_store_once_it_is_back(locked: LockedLedger) -> None:
    probes = Probes()
    ledger = journal(locked, probes, policy="fail_closed")
    waiter = asyncio.ensure_future(ledger.durable(record("a")))
    await settled(lambda: ledger.held == 1, probes)
    locked.unlock()
    await settled(waiter.done, probes)
    assert await waiter == "stored"
    assert [r.key for r in await ledger.store.records()] == [("a", 1)]
    await ledger.aclose()


async def test_fail_open_goes_on_and_keeps_the_record_for_later(locked: LockedLedger) -> None:
    probes = Probes()
    ledger = journal(locked, probes)
    assert await ledger.durable(record("a")) == "held"
    writable(ledger.spill)  # type: ignore[arg-type]
    await settled(lambda: ledger.pending == 0, probes)
    assert ledger.spill is not None and spilled_keys(locked.path.parent / "gone" / locked.path.name) == [("a", 1)]
    await ledger.aclose()


async def test_fail_open_loses_only_past_its_bound_and_books_what_it_lost(locked: LockedLedger) -> None:
    probes = Probes()
    ledger = journal(locked, probes, max_records=2)
    for name, cost in (("a", 0.25), ("b", 0.5), ("c", 1.0)):
        await ledger.durable(record(name, input_tokens=10, cost_usd=cost, user="ada"))
    assert (ledger.lost, ledger.pending) == (1, 2)
    locked.unlock()
    await settled(lambda: not ledger.failing and ledger.pending == 0, probes)
    await ledger.flush()
    rows = {r.call_id: r for r in await ledger.store.records()}
    [lost] = [r for r in rows.values() if r.error_type == "RecordsLost"]
    assert sorted(k for k in rows if not k.startswith("lost-")) == ["b", "c"]
    assert (lost.cost_usd, lost.input_tokens, lost.user, lost.billed) == (0.25, 10, "ada", "unknown")
    await ledger.aclose()


async def test_a_fail_closed_waiter_whose_record_is_lost_at_close_gets_an_error(locked: LockedLedger) -> None:
    probes = Probes()
    ledger = journal(locked, probes, policy="fail_closed")
    waiter = asyncio.ensure_future(ledger.durable(record("a")))
    await settled(lambda: ledger.held == 1, probes)
    await ledger.aclose(timeout_s=0.01)
    with pytest.raises(UsageLedgerUnavailableError, match="could not be made durable"):
        await waiter
    assert ledger.lost == 1
