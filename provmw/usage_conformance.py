"""The usage store contract: pytest tests a ledger store inherits.

Subclass ``UsageStoreConformance`` in a test module (its name must start with ``Test``) and
implement ``open_store(name)``: a new ``name`` opens an empty ledger, the same ``name``
again opens the same ledger (for a store that keeps records once closed). pytest-asyncio
(``asyncio_mode = "auto"``) runs the tests::

    class TestAcmeUsageStore(UsageStoreConformance):
        async def open_store(self, name):
            return AcmeUsageStore(f"acme://127.0.0.1/{name}")

Set ``durable = False`` for a store that keeps nothing once closed (memory). The contract:
writes are idempotent per key ``(call_id, attempt)`` and all-or-nothing per batch;
``records(since)``, every field read back as written (``key_id`` and ``team`` None when
not given); ``summary`` equals :func:`provmw.stores.usage.summary.usage_rows` of the
records for every group, zone and ``since`` (a hypothesis property); ``aclose``. Import it as
``provmw.testing.UsageStoreConformance``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provmw.errors import UsageLedgerUnavailableError
from provmw.stores.usage import UsageRecord, UsageStore
from provmw.stores.usage.summary import GROUPS, Group, usage_rows

__all__ = ["UsageStoreConformance", "usage_records"]

_ZONES = ("UTC", "America/Los_Angeles", "Asia/Kolkata", "Pacific/Chatham", "Europe/Berlin")
_NAMES = st.sampled_from(["ada", "Bob", "émile", "Zoë", "ß", "z", "(none)"])
_KEYS = st.sampled_from(["0123456789ab", "ba9876543210", "(none)"])


def _record(call_id: str, attempt: int = 1, **fields: Any) -> UsageRecord:
    values: dict[str, Any] = {"correlation_id": call_id, "timestamp": 100.0, "operation": "chat",
                              "config_id": "oa", "provider": "openai", "model": "gpt", **fields}
    return UsageRecord(call_id=call_id, attempt=attempt, **values)


def usage_records() -> st.SearchStrategy[UsageRecord]:
    """Records as a fleet writes them: few calls and names (so groups and keys repeat), any time."""
    return st.builds(
        UsageRecord, call_id=st.sampled_from([f"call-{i}" for i in range(8)]),
        attempt=st.integers(0, 3), correlation_id=st.sampled_from(["c1", "c2"]),
        timestamp=st.floats(0, 4e9, allow_nan=False), operation=st.sampled_from(["chat", "embedding"]),
        config_id=_NAMES, provider=st.sampled_from(["openai", "anthropic"]), model=_NAMES,
        user=st.none() | _NAMES, tenant=st.none() | _NAMES, key_id=st.none() | _KEYS, team=st.none() | _NAMES,
        input_tokens=st.integers(0, 10**9),
        output_tokens=st.integers(0, 10**9), cost_usd=st.none() | st.floats(0, 50, allow_nan=False),
        status=st.sampled_from(["ok", "error", "cache_hit"]),
        billed=st.sampled_from(["yes", "no", "unknown", "estimated"]))


def _first_per_key(records: Sequence[UsageRecord], since: float | None) -> list[UsageRecord]:
    kept: dict[tuple[str, int], UsageRecord] = {}
    for record in records:
        kept.setdefault(record.key, record)
    return [r for r in kept.values() if since is None or r.timestamp >= since]


def _same_rows(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    # Cost sums may differ in their last bit between SQL and Python, hence one rounding step.
    assert [{**row, "cost_usd": pytest.approx(row["cost_usd"], abs=1.01e-6)} for row in want] == got


class UsageStoreConformance:
    """Tests every usage store must pass; subclass it and implement ``open_store``."""

    durable: ClassVar[bool] = True

    async def open_store(self, name: str) -> UsageStore:
        """The ledger called ``name`` (a lowercase identifier): empty when new."""
        raise NotImplementedError

    @pytest.fixture
    async def store(self) -> AsyncIterator[UsageStore]:
        store = await self.open_store(f"ledger_{uuid.uuid4().hex[:12]}")
        yield store
        await store.aclose()

    async def test_records_read_back_as_written(self, store: UsageStore) -> None:
        written = _record("c1", user="ada", tenant="acme", key_id="0123456789ab", team="acme/search",
                          input_tokens=3, cached_input_tokens=2, cache_write_5m_tokens=4, cache_write_1h_tokens=5,
                          reasoning_tokens=6, cost_usd=0.5, latency_s=0.25, status="error",
                          error_type="RateLimitError", billed="unknown")
        await store.write([written])
        assert await store.records() == [written]

    async def test_writing_a_key_again_changes_nothing(self, store: UsageStore) -> None:
        await store.write([_record("c1", input_tokens=3)])
        await store.write([_record("c1", input_tokens=99), _record("c1", attempt=2)])
        assert sorted((r.key, r.input_tokens) for r in await store.records()) == [(("c1", 1), 3), (("c1", 2), 0)]

    async def test_calls_sharing_a_correlation_id_keep_their_own_records(self, store: UsageStore) -> None:
        await store.write([_record("call-a", correlation_id="shared"), _record("call-b", correlation_id="shared")])
        assert sorted(r.call_id for r in await store.records()) == ["call-a", "call-b"]

    async def test_a_batch_the_store_refuses_writes_nothing(self, store: UsageStore) -> None:
        await store.write([_record("first")])
        with pytest.raises(Exception) as refused:  # noqa: PT011 - each store raises its own driver's error
            await store.write([_record("also"), _record("absurd", input_tokens=2**63)])
        # A refused batch is not a store down: the journal sets such a record aside, and keeps writing.
        assert not isinstance(refused.value, UsageLedgerUnavailableError), refused.value
        assert [r.call_id for r in await store.records()] == ["first"]

    async def test_a_store_that_refused_a_batch_takes_the_next(self, store: UsageStore) -> None:
        with pytest.raises(Exception):  # noqa: B017, PT011 - each store raises its own driver's error
            await store.write([_record("absurd", input_tokens=2**63)])
        await store.write([])  # the journal's probe: an empty write tells a poison record from a store down
        await store.write([_record("next")])
        assert [r.call_id for r in await store.records()] == ["next"]

    async def test_records_since_a_time_leave_older_ones_out(self, store: UsageStore) -> None:
        await store.write([_record("old", timestamp=10.0), _record("edge", timestamp=15.0),
                           _record("new", timestamp=20.0)])
        assert sorted(r.call_id for r in await store.records(since=15.0)) == ["edge", "new"]

    async def test_concurrent_batches_all_arrive(self, store: UsageStore) -> None:
        await asyncio.gather(*(store.write([_record(f"c{i}", attempt=a) for a in (1, 2)]) for i in range(20)))
        assert len(await store.records()) == 40

    async def test_an_empty_ledger_summarises_to_no_rows(self, store: UsageStore) -> None:
        assert await store.summary("day", ZoneInfo("UTC")) == []

    async def test_a_summary_counts_logical_calls_attempts_and_hits(self, store: UsageStore) -> None:
        await store.write([_record("c1", attempt=1, status="error", billed="unknown"),
                           _record("c1", attempt=2, input_tokens=5, cost_usd=0.25),
                           _record("c2", attempt=0, status="cache_hit", billed="no")])
        [row] = await store.summary("configuration", ZoneInfo("UTC"))
        assert row == {"configuration": "oa", "calls": 2, "attempts": 2, "input_tokens": 5, "output_tokens": 0,
                       "cost_usd": 0.25, "cache_hits": 1, "errors": 1, "billed_unknown": 1}

    async def test_a_record_without_key_or_team_reads_back_without_them(self, store: UsageStore) -> None:
        await store.write([_record("direct", user="ada")])
        [found] = await store.records()
        assert (found.key_id, found.team) == (None, None)

    async def test_a_summary_by_key_puts_calls_without_one_under_none(self, store: UsageStore) -> None:
        await store.write([_record("k1", key_id="0123456789ab", cost_usd=0.5), _record("k2", key_id="0123456789ab"),
                           _record("direct", cost_usd=0.25)])
        rows = await store.summary("key", ZoneInfo("UTC"))
        assert [(row["key"], row["calls"], row["cost_usd"]) for row in rows] == [
            ("(none)", 1, 0.25), ("0123456789ab", 2, 0.5)]

    async def test_a_summary_by_team_keeps_two_organisations_teams_apart(self, store: UsageStore) -> None:
        await store.write([_record("a", team="acme/search"), _record("b", team="beta/search"),
                           _record("c", team="acme/search", attempt=2)])
        rows = await store.summary("team", ZoneInfo("UTC"))
        assert [(row["team"], row["calls"], row["attempts"]) for row in rows] == [
            ("acme/search", 2, 2), ("beta/search", 1, 1)]

    async def test_a_summary_by_day_counts_in_the_zone_asked(self, store: UsageStore) -> None:
        await store.write([_record("late", timestamp=1_795_377_600.0)])  # 2026-11-22 20:00 UTC
        kolkata = await store.summary("day", ZoneInfo("Asia/Kolkata"))
        samoa = await store.summary("day", ZoneInfo("Pacific/Pago_Pago"))
        assert [(row["day"], row["calls"]) for row in kolkata + samoa] == [("2026-11-23", 1), ("2026-11-22", 1)]

    @settings(max_examples=30, deadline=None, suppress_health_check=[
        HealthCheck.function_scoped_fixture, HealthCheck.differing_executors])
    @given(batches=st.lists(st.lists(usage_records(), max_size=12), max_size=3),
           group_by=st.sampled_from(GROUPS), zone=st.sampled_from(_ZONES),
           since=st.none() | st.floats(0, 4e9, allow_nan=False))
    async def test_the_summary_equals_the_reference_grouping(self, batches: list[list[UsageRecord]],
                                                             group_by: Group, zone: str, since: float | None) -> None:
        store = await self.open_store(f"ledger_{uuid.uuid4().hex[:12]}")
        try:
            for batch in batches:
                await store.write(batch)
            got = await store.summary(group_by, ZoneInfo(zone), since)
        finally:
            await store.aclose()
        _same_rows(got, usage_rows(_first_per_key([r for b in batches for r in b], since), group_by, ZoneInfo(zone)))

    async def test_records_outlive_closing_the_store(self) -> None:
        if not self.durable:
            pytest.skip("this store keeps nothing once closed")
        name = f"ledger_{uuid.uuid4().hex[:12]}"
        first = await self.open_store(name)
        await first.write([_record("kept")])
        await first.aclose()
        again = await self.open_store(name)
        assert [r.call_id for r in await again.records()] == ["kept"]
        await again.aclose()

    async def test_a_store_never_used_closes(self) -> None:
        store = await self.open_store(f"ledger_{uuid.uuid4().hex[:12]}")
        await store.aclose()
