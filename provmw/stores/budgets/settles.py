"""The budget's settle journal: where a settle is durable before it is committed (ADR 0032).

A ``SqliteBudgetStore`` at ``synchronous = NORMAL`` commits a settle with the next step's
transaction instead of one of its own. Until then the settle is a line in a file of this
process's own beside the database (``<db>.settles.<id>``), one ``os.write``, no fsync: like
a commit at ``NORMAL``, it survives the death of the process (kill -9), not of the machine.

The file stays locked (``flock``) while its process lives. Any process opening the budget
replays the files whose lock is free (their process died) inside its next step's
transaction, then removes them; a settle is idempotent (it deletes its reservation, and a
second one finds none), so a line replayed twice, or one already committed, counts once.
The file is created under another name and renamed once locked, so no replay sees it unlocked.

A block of budget (ADR 0035: room for many calls, reserved at once) writes its running total
after each of its calls: a line per call under the block's id, the spend of its calls settled
so far. A replay counts the largest total of each block (every figure only grows), so the
lines before it, a line replayed twice and one already committed all count once; while
the block lives, a file that starts over begins with its total.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path

import attrs

__all__ = ["BLOCK", "Orphans", "SettleJournal", "Settle", "merged"]

Settle = tuple[str, int, int, int]  # reservation id, micro-dollars, tokens, requests
BLOCK = "block-"  # the reservation ids of blocks, whose lines are running totals
_RESET_BYTES = 64 * 1024  # once everything in it is committed, a file this long starts over


@attrs.define
class Orphans:
    """The settles of dead processes' journals, locked by this process until ``done`` or ``release``."""

    settles: list[Settle]
    files: list[tuple[Path, int]]

    def done(self) -> None:
        """Their settles are committed: remove the files."""
        for path, fd in self.files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            os.close(fd)
        self.files = []

    def release(self) -> None:
        """Their settles went nowhere: unlock the files for the next replay."""
        for _, fd in self.files:
            os.close(fd)
        self.files = []


class SettleJournal:
    """This process's settle journal beside the database at ``database``."""

    def __init__(self, database: Path) -> None:
        self._folder, self._prefix = database.parent, f"{database.name}.settles."
        self._path: Path | None = None
        self._fd = -1
        self._size = 0
        self._running: dict[str, Settle] = {}  # the live blocks' totals, written again when the file starts over
        _journals.add(self)

    def _forget(self) -> None:
        """In a forked child: the parent's file (and its lock) stays the parent's; the child opens its own."""
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._path, self._size = -1, None, 0
        self._running.clear()

    def append(self, reservation_id: str, cost_micro_usd: int, tokens: int, requests: int) -> None:
        """Write one settle (a block's last total, when it is one); it survives kill -9 once this
        returns. Raises ``OSError``."""
        self._write(f"{reservation_id} {cost_micro_usd} {tokens} {requests}\n".encode())
        self._running.pop(reservation_id, None)  # on failure, its last total stays until ``forget``

    def forget(self, reservation_id: str) -> None:
        """A block's settle is committed without its line (the journal had no room): no total to keep."""
        self._running.pop(reservation_id, None)

    def running(self, block_id: str, cost_micro_usd: int, tokens: int, requests: int) -> None:
        """Write a live block's total so far; it survives kill -9 once this returns. Raises ``OSError``."""
        self._write(f"{block_id} {cost_micro_usd} {tokens} {requests}\n".encode())
        self._running[block_id] = (block_id, cost_micro_usd, tokens, requests)

    def committed(self) -> None:
        """Every settle written so far is committed: a long file starts over, with the live blocks' totals."""
        if self._size < _RESET_BYTES:
            return
        if not self._running:
            os.ftruncate(self._fd, 0)
            self._size = 0
            return
        # A new file with the totals, then the old one goes: a crash between leaves both, each total
        # in both, and a replay counts a block's largest total once.
        old = self._path, self._fd, self._size
        self._fd, self._path, self._size = -1, None, 0
        try:
            for total in self._running.values():
                self._write(" ".join(map(str, total)).encode() + b"\n")
        except OSError:  # no room for a new file: the old one goes on, whole
            if self._fd >= 0 and self._path is not None:
                os.unlink(self._path)
                os.close(self._fd)
            self._path, self._fd, self._size = old
            raise
        if old[0] is not None:
            os.unlink(old[0])
        os.close(old[1])

    def close(self, *, committed: bool) -> None:
        """Close (and remove, when everything in it is committed) this process's file; one with a live
        block's total stays open, and locked, until the process ends, so that no replay takes the block
        from under its calls still in flight."""
        if self._fd < 0 or self._running:
            return
        if committed and self._path is not None:
            os.unlink(self._path)
        os.close(self._fd)
        self._fd, self._path, self._size = -1, None, 0

    def orphans(self) -> Orphans:
        """The settles in the journals of processes that died, their files locked by this one."""
        found = Orphans([], [])
        for path in self._folder.glob(f"{self._prefix}*"):
            if path == self._path or path.name.endswith(".opening"):
                continue
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:  # another process replayed it meanwhile
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # its process lives, or another replays it now
                os.close(fd)
                continue
            found.files.append((path, fd))
            found.settles.extend(_read(fd))
        return found

    def _write(self, line: bytes) -> None:
        if self._fd < 0:
            self._open()
        written = os.write(self._fd, line)
        if written != len(line):  # a short write to a regular file: the disk is full
            os.ftruncate(self._fd, self._size)  # no half line for the next one to be glued to
            raise OSError(f"settle journal {self._path}: wrote {written} of {len(line)} bytes")
        self._size += written

    def _open(self) -> None:
        opening = self._folder / f"{self._prefix}{uuid.uuid4().hex}.opening"
        fd = os.open(opening, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        path = opening.with_suffix("")
        os.rename(opening, path)
        self._path, self._fd = path, fd


# Every journal of this process, so that a forked child writes to files of its own (os.register_at_fork
# cannot be undone, so one hook serves them all; the set holds them weakly).
_journals: weakref.WeakSet[SettleJournal] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for journal in list(_journals):
        journal._forget()


os.register_at_fork(after_in_child=_after_fork_in_child)


def merged(settles: Iterable[Settle]) -> list[Settle]:
    """One settle per reservation: the first of each (a second finds it gone), and of each block
    its largest total."""
    found: dict[str, Settle] = {}
    for settle in settles:
        rid = settle[0]
        seen = found.get(rid)
        if seen is None:
            found[rid] = settle
        elif rid.startswith(BLOCK):
            found[rid] = (rid, max(seen[1], settle[1]), max(seen[2], settle[2]), max(seen[3], settle[3]))
    return list(found.values())


def _read(fd: int) -> Iterator[Settle]:
    with os.fdopen(os.dup(fd), "rb") as file:
        for line in file:
            parts = line.split()
            # A line cut by the crash (no newline, or fewer fields) is skipped: its call never returned.
            if len(parts) == 4 and line.endswith(b"\n") and all(p.isdigit() for p in parts[1:]):
                yield parts[0].decode("ascii", "replace"), int(parts[1]), int(parts[2]), int(parts[3])
