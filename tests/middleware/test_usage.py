"""The usage ledger over real HTTP: one record per attempt, exactly once, through outages."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

from provmw.config import ProviderConfig
from provmw.context import Principal
from provmw.errors import ProviderConnectionError, UsageLedgerUnavailableError
from provmw.manager import ServiceManager
from provmw.middleware.usage import UsageMiddleware
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.stores.usage import SqliteUsageStore, UsageRecord
from provmw.stores.usage.spill import SpillFile
from provmw.testing import FakeProvider, Fault
from tests.conftest import anthropic_config, openai_config
from tests.stores.test_journal import LockedLedger, spilled_keys

PRICE = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0}


def settings(fake: FakeProvider, ledger: Path, oa: ProviderConfig | None = None,
             **middleware: dict[str, Any]) -> Settings:
    return Settings(
        configurations={"oa": oa or openai_config(fake, fallbacks=("an",), timeout_s=0.3, price=PRICE),
                        "an": anthropic_config(fake, price=PRICE)},
        default="oa",
        middleware={"retry": {"base_s": 0.001, "max_wait_s": 0.01, "max_attempts": 2},
                    "usage": {"path": str(ledger), "busy_timeout_s": 0.01}, **middleware})


def ledger_of(manager: ServiceManager) -> UsageMiddleware:
    [usage] = [m for m in manager.pipeline.middlewares if isinstance(m, UsageMiddleware)]
    return usage


async def records(path: Path) -> list[UsageRecord]:
    store = SqliteUsageStore(path)
    found = await store.records()
    await store.aclose()
    return found


async def test_503_then_timeout_then_fallback_gives_three_records_of_one_call(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    fake.script(Fault(status=503), Fault(delay_s=1.0), model="gpt-test")
    async with ServiceManager(settings(fake, tmp_path / "u.db"), host=builtin_only) as manager:
        response = await manager.chat("hello there")
    found = await records(tmp_path / "u.db")
    assert [(r.attempt, r.config_id, r.status, r.error_type, r.billed) for r in found] == [
        (1, "oa", "error", "ProviderUnavailableError", "no"),
        (2, "oa", "error", "AttemptTimeoutError", "unknown"),  # the fake did process it
        (3, "an", "ok", None, "yes")]
    assert len({r.correlation_id for r in found}) == 1
    assert found[2].cost_usd == response.usage.cost_usd is not None
    assert fake.count(model="gpt-test") == 2


async def test_replaying_the_writes_changes_nothing(fake: FakeProvider, builtin_only: PluginHost,
                                                   tmp_path: Path) -> None:
    fake.script(Fault(status=503), model="gpt-test")
    async with ServiceManager(settings(fake, tmp_path / "u.db"), host=builtin_only) as manager:
        await manager.chat("hello there", user="ada", tenant="acme")
    first = await records(tmp_path / "u.db")
    store = SqliteUsageStore(tmp_path / "u.db")
    await store.write(first)
    await store.write(first[::-1])
    await store.aclose()
    assert await records(tmp_path / "u.db") == first
    assert {(r.user, r.tenant) for r in first} == {("ada", "acme")}


async def test_a_call_with_a_principal_records_its_key_id_and_team_on_every_attempt(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    fake.script(Fault(status=503), model="gpt-test")
    caller = Principal(key="0123456789ab", team="search", organisation="acme", user="ada")
    async with ServiceManager(settings(fake, tmp_path / "u.db"), host=builtin_only) as manager:
        await manager.chat("hello there", user="acme/ada", tenant="acme", principal=caller)
    found = await records(tmp_path / "u.db")
    assert [(r.attempt, r.key_id, r.team) for r in found] == [(1, "0123456789ab", "acme/search"),
                                                              (2, "0123456789ab", "acme/search")]


async def test_a_direct_call_records_no_key_id_nor_team(fake: FakeProvider, builtin_only: PluginHost,
                                                        tmp_path: Path) -> None:
    async with ServiceManager(settings(fake, tmp_path / "u.db"), host=builtin_only) as manager:
        await manager.chat("hello there", user="ada", tenant="acme")
    [found] = await records(tmp_path / "u.db")
    assert (found.user, found.key_id, found.team) == ("ada", None, None)


async def test_a_cache_hit_is_recorded_as_attempt_0_and_costs_nothing(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    async with ServiceManager(settings(fake, tmp_path / "u.db"), host=builtin_only) as manager:
        await manager.embed("same text", configuration="oa")
        await manager.embed("same text", configuration="oa")
    found = await records(tmp_path / "u.db")
    assert [(r.attempt, r.status, r.billed, r.cost_usd) for r in found][1:] == [(0, "cache_hit", "no", 0.0)]
    assert fake.count() == 1


async def test_a_loop_of_cache_hits_never_holds_more_than_two_batches_of_records(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    async with ServiceManager(settings(fake, tmp_path / "u.db"), host=builtin_only) as manager:
        journal = ledger_of(manager).journal
        queued = []
        for _ in range(2_500):  # a hit waits for no socket: only the journal gives the loop a turn
            await manager.embed("same text", configuration="oa")
            queued.append(journal.pending)
    assert max(queued) <= 2_000  # a batch queued, and at most the one the writer has taken
    assert len(await records(tmp_path / "u.db")) == 2_500
    assert fake.count() == 1


@pytest.mark.slow  # 10,000 calls: a load scenario (about 12 s)
async def test_ten_thousand_calls_through_a_failing_store_are_all_recorded_once(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    locked = LockedLedger(tmp_path / "u.db")
    async with ServiceManager(settings(fake, locked.path), host=builtin_only) as manager:
        for _ in range(100):
            await asyncio.gather(*(manager.chat("hi", configuration="an") for _ in range(100)))
        assert (ledger_of(manager).journal.pending, ledger_of(manager).journal.spilled) == (0, 10_000)
        locked.unlock()
    found = await records(locked.path)
    assert len(found) == len({r.key for r in found}) == 10_000


async def test_fail_closed_refuses_past_the_journal_before_the_provider_sees_it(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    locked = LockedLedger(tmp_path / "u.db")
    usage = {"path": str(locked.path), "busy_timeout_s": 0.01, "failure_policy": "fail_closed",
             "max_journal_records": 3}
    async with ServiceManager(settings(fake, locked.path, usage=usage), host=builtin_only) as manager:
        for _ in range(3):
            await manager.chat("hi", configuration="an")
        with pytest.raises(UsageLedgerUnavailableError):
            await manager.chat("hi", configuration="an")
        assert fake.count() == 3
        locked.unlock()
    assert len(await records(locked.path)) == 3


async def test_a_call_the_ledger_refuses_gives_the_loop_a_turn(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    # The journal's probe for the store's return is a task: a caller retrying refusals at once
    # would otherwise keep it from ever running.
    locked = LockedLedger(tmp_path / "u.db")
    usage = {"path": str(locked.path), "busy_timeout_s": 0.01, "failure_policy": "fail_closed",
             "max_journal_records": 1}
    async with ServiceManager(settings(fake, locked.path, usage=usage), host=builtin_only) as manager:
        await manager.chat("hi", configuration="an")
        turns: list[bool] = []
        asyncio.get_running_loop().call_soon(turns.append, True)
        with pytest.raises(UsageLedgerUnavailableError):
            await manager.chat("hi", configuration="an")
        assert turns == [True]
        locked.unlock()


class HedgeMiddleware:
    """Sends every attempt twice at once and answers with the first; a test of per-call numbering."""

    name, priority = "hedge", 350

    async def handle(self, ctx: Any, config: Any, next: Any) -> Any:
        first, _ = await asyncio.gather(next(config), next(config))
        return first


async def test_parallel_attempts_each_get_a_ledger_record(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    ledger = tmp_path / "u.db"
    async with ServiceManager(settings(fake, ledger), host=builtin_only, middleware=[HedgeMiddleware()]) as manager:
        response = await manager.chat("hello there")
    found = await records(ledger)
    assert fake.count() == len(response.attempts) == len(found) == 2
    assert sorted(r.attempt for r in found) == [1, 2]


async def test_ten_concurrent_calls_sharing_a_correlation_id_give_ten_records(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    async with ServiceManager(settings(fake, tmp_path / "u.db"), host=builtin_only) as manager:
        await asyncio.gather(*(manager.chat(f"hi {i}", configuration="an", correlation_id="caller-1")
                               for i in range(10)))
    found = await records(tmp_path / "u.db")
    assert len(found) == len({r.call_id for r in found}) == 10
    assert {r.correlation_id for r in found} == {"caller-1"}


def refused_url() -> str:
    """A loopback port nothing listens on: bound, then released."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/v1"


async def billed_of_unreachable(fake: FakeProvider, host: PluginHost, ledger: Path, base_url: str) -> list[str]:
    oa = openai_config(fake, base_url=base_url)
    async with ServiceManager(settings(fake, ledger, oa), host=host) as manager:
        with pytest.raises(ProviderConnectionError):
            await manager.chat("hello", configuration="oa")
    return [r.billed for r in await records(ledger)]


async def test_a_refused_connection_is_recorded_as_not_billed(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    billed = await billed_of_unreachable(fake, builtin_only, tmp_path / "u.db", refused_url())
    assert billed == ["no", "no"]  # both attempts the retry made


async def test_a_host_name_that_does_not_resolve_is_recorded_as_not_billed(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    billed = await billed_of_unreachable(fake, builtin_only, tmp_path / "u.db", "http://provider.invalid/v1")
    assert billed == ["no", "no"]


async def test_a_connection_dropped_after_sending_stays_billed_unknown(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    fake.script(Fault(drop_connection=True), Fault(drop_connection=True), model="gpt-test")
    async with ServiceManager(settings(fake, tmp_path / "u.db", openai_config(fake)), host=builtin_only) as manager:
        with pytest.raises(ProviderConnectionError):
            await manager.chat("hello", configuration="oa")
    assert [r.billed for r in await records(tmp_path / "u.db")] == ["unknown", "unknown"]


async def test_a_ledger_locked_through_close_loses_nothing_and_the_next_start_replays_it(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    locked = LockedLedger(tmp_path / "u.db")
    async with ServiceManager(settings(fake, locked.path), host=builtin_only) as manager:
        await asyncio.gather(*(manager.chat("hi", configuration="an") for _ in range(20)))
    assert len(spilled_keys(locked.path)) == 20
    locked.unlock()
    async with ServiceManager(settings(fake, locked.path), host=builtin_only) as manager:
        await manager.chat("hi", configuration="an")
    assert len(await records(locked.path)) == 21
    assert not SpillFile(f"{locked.path}.spill").exists()
