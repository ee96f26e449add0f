"""The journal's write-ahead file: where a record is durable before its call returns (ADR 0027).

Each process appends its records to a file of its own beside the spill file, one
``os.write`` of one JSON line per record, without fsync: once ``append`` returns, the line is
in the kernel and survives the death of the process (kill -9), not of the machine. The
writer then takes records to the store in batches, off the call path. A segment is used
until it holds ``segment_bytes``; the writer then seals it, and removes it once the batch
that emptied the queue is in the store (or the spill file). Creating a file costs far more
than appending a line, so one segment serves many batches: after a crash, the next replay
writes again those records of the last segment that were already stored, which count once.

A segment is named like a claim the spill file's replay takes over
(``<spill>.<id>.replay``) and stays locked while its process lives, so a replay in any
process sharing the ledger skips it; once the process dies the lock is gone and the next
replay writes its records into the store (idempotent per key: a record also stored before
the crash counts once). It is created under another name and renamed once locked, so no
replay ever sees it unlocked.
"""

from __future__ import annotations

import fcntl
import os
import uuid
import weakref

import attrs

from provmw.stores.usage import UsageRecord
from provmw.stores.usage.spill import SpillFile, encode_record, write_all

__all__ = ["Segment", "WriteAheadFile"]


@attrs.frozen
class Segment:
    """A sealed write-ahead segment: every record in it is also in one batch of the writer."""

    path: os.PathLike[str] | str
    fd: int

    def drop(self) -> None:
        """Its records are in the store or the spill file: remove it."""
        os.unlink(self.path)
        os.close(self.fd)

    def keep(self) -> None:
        """Some of its records went nowhere: unlock it, so that the next replay takes it."""
        os.close(self.fd)


class WriteAheadFile:
    """This process's write-ahead segments beside ``spill``'s file."""

    def __init__(self, spill: SpillFile, *, segment_bytes: int = 1 << 20) -> None:
        self._spill = spill
        self._segment_bytes = segment_bytes
        self._current: Segment | None = None
        self._size = 0
        _files.add(self)

    def _forget(self) -> None:
        """In a forked child: the parent's segment (and its lock) stays the parent's, which drops it
        once its own records are stored; the child appends to a segment of its own."""
        if self._current is not None:
            os.close(self._current.fd)  # the lock holds while the parent's descriptor is open
        self._current, self._size = None, 0

    @property
    def full(self) -> bool:
        """Whether the current segment is due to be sealed."""
        return self._size >= self._segment_bytes

    def append(self, record: UsageRecord) -> None:
        """Add ``record`` to the current segment; it survives kill -9 once this returns. Raises ``OSError``."""
        if self._current is None:
            self._current = self._open()
        line = encode_record(record)
        write_all(self._current.fd, line)
        self._size += len(line)

    def seal(self) -> Segment | None:
        """The current segment (None if nothing was appended since the last seal); the next
        append starts another one."""
        sealed, self._current, self._size = self._current, None, 0
        return sealed

    def _open(self) -> Segment:
        name = self._spill.path.name
        opening = self._spill.path.with_name(f"{name}.{uuid.uuid4().hex}.opening")
        fd = os.open(opening, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        path = opening.with_suffix(".replay")
        os.rename(opening, path)
        return Segment(path, fd)


# Every write-ahead file of this process, so that a forked child writes to segments of its own
# (one fork hook for all, held weakly).
_files: weakref.WeakSet[WriteAheadFile] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for file in list(_files):
        file._forget()


os.register_at_fork(after_in_child=_after_fork_in_child)
