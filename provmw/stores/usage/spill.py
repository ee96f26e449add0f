"""The spill file: usage records the store could not take, kept on disk until it can.

An append-only JSON-lines file next to the ledger (``provmw.sqlite3.spill``). Appending is
one ``os.write`` of whole lines under an exclusive ``flock``, so a process killed right
after ``append`` returns has left its records in the kernel, and processes sharing the
ledger share the file without interleaving. ``fsync=True`` also survives power loss.

Replaying never races an appender: :meth:`SpillFile.claim` renames the file under its lock
to a private ``<name>.<id>.replay`` and keeps that locked while the records are written to
the store. An appender that opened the old file notices the rename and opens the new one.
A claim whose owner died (its lock is free) is claimed again by the next replay, so a
crash mid-replay loses nothing; the store's writes are idempotent per key, so a record
replayed twice still counts once.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import operator
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

import attrs

from provmw.stores.usage import UsageRecord

__all__ = ["SpillClaim", "SpillFile", "encode_record", "write_all"]

log = logging.getLogger(__name__)


_FIELDS = tuple(a.name for a in attrs.fields(UsageRecord))
_VALUES = operator.attrgetter(*_FIELDS)  # every field is a plain value: no attrs.asdict recursion
_encode = json.JSONEncoder(separators=(",", ":")).encode  # one encoder: json.dumps would build one per record
# A record's line as json.dumps writes it, its values filled in by type: the encoder's setup cost
# more than the line (6 us to 3.6), and every record is encoded once per call (the write-ahead file).
_LINE = "{" + ",".join(f'"{name}":%s' for name in _FIELDS) + "}\n"


def _float(value: float) -> str:
    return repr(value) if math.isfinite(value) else _encode(value)


_WRITERS: dict[type, Callable[[Any], str]] = {str: encode_basestring_ascii, int: int.__repr__, float: _float,
                                               type(None): lambda _: "null"}


def encode_record(record: UsageRecord) -> bytes:
    """One record as one JSON line."""
    try:
        return (_LINE % tuple([_WRITERS[type(value)](value) for value in _VALUES(record)])).encode()
    except KeyError:  # a value of another type (a bool, a str subclass): the encoder decides
        return _encode(dict(zip(_FIELDS, _VALUES(record), strict=True))).encode() + b"\n"


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd``."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


@attrs.define
class SpillClaim:
    """A spill file this process took for replay; locked until ``release`` or ``done``."""

    path: Path
    fd: int
    records: list[UsageRecord]

    def done(self) -> None:
        """The store has every record: remove the file."""
        self.path.unlink(missing_ok=True)
        os.close(self.fd)

    def release(self) -> None:
        """Give the claim back (the store failed); the next replay takes it again."""
        os.close(self.fd)


def _after_a_cut(fd: int) -> bytes:
    """A newline when the file ends in a line cut short (a writer killed mid-append), so the next
    record starts a line of its own instead of spoiling both."""
    size = os.fstat(fd).st_size
    return b"\n" if size and os.pread(fd, 1, size - 1) != b"\n" else b""


class SpillFile:
    """Records set aside at ``path``; ``fsync`` makes an append survive power loss too."""

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync

    def append(self, records: Sequence[UsageRecord]) -> None:
        """Add ``records`` to the file; they are in the kernel (or on disk) when this returns."""
        if not records:
            return
        data = b"".join(map(encode_record, records))
        fd = self._open_current()
        try:
            size = os.fstat(fd).st_size
            try:
                write_all(fd, _after_a_cut(fd) + data)
                if self.fsync:
                    os.fsync(fd)
            except OSError:  # a full disk may take part of it: leave no cut line behind, the caller keeps them all
                os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)  # closing drops the lock

    def exists(self) -> bool:
        """Whether anything waits for replay (the file, or a claim a dead process left)."""
        return self.path.exists() or any(self._claims())

    def claim(self) -> list[SpillClaim]:
        """Take the spill file and every abandoned claim for replay."""
        return [c for c in (self._claim_current(), *map(self._reclaim, self._claims())) if c is not None]

    def _open_current(self) -> int:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _same_file(fd, self.path):
                return fd
            os.close(fd)  # renamed by a replay while we waited: append to the new file

    def _claim_current(self) -> SpillClaim | None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not _same_file(fd, self.path):
            os.close(fd)
            return None
        claimed = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex}.replay")
        os.rename(self.path, claimed)
        return SpillClaim(claimed, fd, _read(fd, claimed))

    def _claims(self) -> Iterable[Path]:
        return self.path.parent.glob(f"{self.path.name}.*.replay")

    def _reclaim(self, path: Path) -> SpillClaim | None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # its owner is alive and replaying it
            os.close(fd)
            return None
        if os.fstat(fd).st_nlink == 0:  # finished and removed while we looked
            os.close(fd)
            return None
        return SpillClaim(path, fd, _read(fd, path))


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _read(fd: int, path: Path) -> list[UsageRecord]:
    with os.fdopen(os.dup(fd), "rb") as file:
        lines = file.read().splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(UsageRecord(**json.loads(line)))
        except (ValueError, TypeError) as exc:  # a line cut short by a crash: keep it for a human
            log.error("usage ledger: %s line %d is not a usage record (%s); left in %s.bad",
                      path.name, number, exc, path.name)
            with open(f"{path}.bad", "ab") as bad:
                bad.write(line + b"\n")
    return records
