"""The spill file: records round-trip exactly, and a replay's claim never swallows a later append."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.stores.usage import SqliteUsageStore, UsageRecord
from provmw.stores.usage.journal import UsageJournal
from provmw.stores.usage.spill import SpillFile, encode_record
from tests.stores.test_usage_store import record

texts = st.text(max_size=20)
records = st.builds(UsageRecord, call_id=texts, attempt=st.integers(0, 10), correlation_id=texts,
                    timestamp=st.floats(allow_nan=False), operation=texts, config_id=texts, provider=texts,
                    model=texts, user=st.none() | texts, key_id=st.none() | texts, team=st.none() | texts,
                    input_tokens=st.integers(0, 2**70),
                    cost_usd=st.none() | st.floats(allow_nan=False), billed=st.sampled_from(["yes", "no", "unknown"]))


@given(st.lists(records, max_size=5))
def test_any_record_comes_back_from_the_spill_file_unchanged(tmp_path_factory: pytest.TempPathFactory,
                                                             spilled: list[UsageRecord]) -> None:
    spill = SpillFile(tmp_path_factory.mktemp("spill") / "u.db.spill")
    spill.append(spilled)
    claimed = [r for claim in spill.claim() for r in claim.records]
    assert claimed == spilled


@given(records)
def test_a_record_is_written_as_json_dumps_writes_it(spilled: UsageRecord) -> None:
    assert encode_record(spilled) == (json.dumps(attrs.asdict(spilled), separators=(",", ":")) + "\n").encode()


def test_an_append_after_a_claim_goes_to_a_new_file(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "u.db.spill")
    spill.append([record("a")])
    [claim] = spill.claim()
    spill.append([record("b")])
    claim.done()
    assert [r.key for c in spill.claim() for r in c.records] == [("b", 1)]


def test_a_claim_held_by_a_live_replay_is_left_alone(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "u.db.spill")
    spill.append([record("a")])
    [held] = spill.claim()
    assert spill.claim() == []
    held.release()
    assert [r.key for c in spill.claim() for r in c.records] == [("a", 1)]


def test_a_line_cut_short_by_a_killed_writer_spoils_no_later_record(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "u.db.spill")
    spill.append([record("a")])
    with spill.path.open("ab") as cut:
        cut.write(b'{"call_id": "half-writ')  # a writer killed mid-append
    spill.append([record("b")])
    assert [r.key for c in spill.claim() for r in c.records] == [("a", 1), ("b", 1)]


async def test_a_line_written_before_key_id_and_team_replays_without_them(tmp_path: Path) -> None:
    line = {k: v for k, v in attrs.asdict(record("old", user="ada")).items() if k not in ("key_id", "team")}
    (tmp_path / "u.db.spill").write_text(json.dumps(line) + "\n")
    store = SqliteUsageStore(tmp_path / "u.db")  # its spill file: u.db.spill
    journal = UsageJournal(store)
    await journal.replay()
    assert await store.records() == [record("old", user="ada")]
    await journal.aclose()
