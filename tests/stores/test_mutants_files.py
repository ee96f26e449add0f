"""The ledger's files on disk: who may read them, and what a forked child writes to (docs/testing.md)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import stat
from pathlib import Path

from provmw.stores.usage import write_ahead
from provmw.stores.usage.spill import SpillFile, encode_record
from provmw.stores.usage.write_ahead import WriteAheadFile
from tests.polling import eventually
from tests.stores.test_usage_store import record


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_spill_file_is_created_readable_by_its_owner_only(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "u.db.spill")
    spill.append([record("a")])
    assert mode(spill.path) == 0o600


def test_a_write_ahead_segment_is_created_readable_by_its_owner_only(tmp_path: Path) -> None:
    ahead = WriteAheadFile(SpillFile(tmp_path / "u.db.spill"))
    ahead.append(record("a"))
    [segment] = tmp_path.glob("u.db.spill.*.replay")
    assert mode(segment) == 0o600
    ahead.seal().drop()  # type: ignore[union-attr]


def test_after_a_fork_the_child_appends_to_a_segment_of_its_own(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "u.db.spill")
    ahead = WriteAheadFile(spill)
    ahead.append(record("parent"))
    # The hook os.register_at_fork runs in a child, called here so that the run can see it: the parent's
    # segment is no longer this process's (its lock is gone with the descriptor), a new one takes the record.
    write_ahead._after_fork_in_child()
    ahead.append(record("child"))
    [claim] = spill.claim()  # the parent's segment, unlocked; the child's is still held
    assert [r.key for r in claim.records] == [("parent", 1)]
    claim.done()
    ahead.seal().drop()  # type: ignore[union-attr]


def test_after_a_fork_the_childs_segment_starts_empty(tmp_path: Path) -> None:
    line = len(encode_record(record("a")))
    ahead = WriteAheadFile(SpillFile(tmp_path / "u.db.spill"), segment_bytes=line + 1)
    ahead.append(record("a"))
    write_ahead._after_fork_in_child()
    ahead.append(record("b"))
    assert not ahead.full  # one line in it, one byte short of a full segment
    ahead.seal().drop()  # type: ignore[union-attr]


def test_a_write_ahead_segment_is_full_once_its_lines_reach_its_size_and_a_new_one_starts_empty(
        tmp_path: Path) -> None:
    line = len(encode_record(record("a")))
    ahead = WriteAheadFile(SpillFile(tmp_path / "u.db.spill"), segment_bytes=line + 1)
    full = []
    for name in "abc":
        ahead.append(record(name))
        full.append(ahead.full)
        if ahead.full:
            ahead.seal().drop()  # type: ignore[union-attr]
    assert full == [False, True, False]  # one line is a byte short; two are past it; the next segment has one
    ahead.seal().drop()  # type: ignore[union-attr]


def descriptors_on(path: Path) -> int:
    """How many of this process's open files are ``path``."""
    target = os.path.realpath(path)
    return sum(os.path.realpath(f"/proc/self/fd/{fd}") == target for fd in os.listdir("/proc/self/fd"))


def keys_in(path: Path) -> list[tuple[str, int]]:
    return [(value["call_id"], value["attempt"]) for value in map(json.loads, path.read_text().splitlines())]


async def test_an_append_that_waited_while_a_replay_took_the_file_writes_to_a_new_one(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "u.db.spill")
    spill.append([record("old")])
    replay = os.open(spill.path, os.O_RDONLY)
    fcntl.flock(replay, fcntl.LOCK_EX)  # a replay has the file locked ...
    appending = asyncio.ensure_future(asyncio.to_thread(spill.append, [record("new")]))
    assert await eventually(lambda: descriptors_on(spill.path), (2).__le__) == 2  # opened, waiting for the lock
    claimed = spill.path.with_name("u.db.spill.deadbeef.replay")
    os.rename(spill.path, claimed)  # ... takes it for itself, and lets go
    os.close(replay)
    await asyncio.wait_for(appending, 5)
    assert (keys_in(claimed), keys_in(spill.path)) == ([("old", 1)], [("new", 1)])


class Name(str):
    """A str subclass, as an enum of names or a tagged string would be."""


def test_a_record_holding_a_str_subclass_is_written_as_the_plain_record_is() -> None:
    assert encode_record(record("a", model=Name("gpt"))) == encode_record(record("a", model="gpt"))


def test_a_spill_file_does_not_sync_by_default(tmp_path: Path) -> None:
    assert SpillFile(tmp_path / "u.db.spill").fsync is False


def test_a_spill_file_that_syncs_appends_the_records(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "u.db.spill", fsync=True)
    spill.append([record("a")])
    assert spill.path.read_bytes() == encode_record(record("a"))


def test_a_claim_whose_file_another_replay_removed_is_done_all_the_same(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "u.db.spill")
    spill.append([record("a")])
    [claim] = spill.claim()
    claim.path.unlink()
    claim.done()
    assert spill.claim() == []


def test_a_line_that_is_not_a_record_is_left_as_it_was_in_the_bad_file(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "u.db.spill")
    spill.path.write_bytes(b"not json\n" + encode_record(record("a")))
    [claim] = spill.claim()
    assert [r.correlation_id for r in claim.records] == ["a"]
    assert Path(f"{claim.path}.bad").read_bytes() == b"not json\n"
    claim.done()
