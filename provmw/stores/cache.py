"""Response cache storage: the store interface and the bounded in-memory store.

Stores hold JSON text (``response.to_dict()`` serialized), never pickles, so a poisoned
entry can at worst fail to decode; the cache middleware treats that as a miss. The
in-process memory store also keeps answers as they are (``keeps_answers``: ``keep`` and
``kept``, ADR 0031): nothing outside the process can write it, so there is nothing to
decode or distrust, and the middleware saves the JSON both ways. A store
shared by many processes also hands out short claims, so that of all the processes
missing one key at once only the claim holder calls upstream while the others wait for
its entry. A store whose claims are always granted (this module's memory store) says so
with ``grants_every_claim = True``, and the middleware then never asks it for one.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["CacheStore", "MemoryCacheStore"]


class CacheStore(Protocol):
    """Where cached answers live, keyed by the cache middleware's full key."""

    async def get(self, key: str) -> str | None:
        """The JSON text stored under ``key``, or None when absent or expired."""
        ...

    async def set(self, key: str, value: str, ttl_s: float) -> None:
        """Store ``value`` under ``key`` for ``ttl_s`` seconds."""
        ...

    async def delete(self, key: str) -> None:
        """Forget ``key`` (a corrupt entry, for instance)."""
        ...

    async def claim(self, key: str, ttl_s: float) -> str | None:
        """Become the one filler of ``key`` for at most ``ttl_s``: a token for ``unclaim``, or None
        while someone else holds the claim."""
        ...

    async def unclaim(self, key: str, token: str) -> None:
        """Give a claim back (its entry is written, or its call failed)."""
        ...


class MemoryCacheStore:
    """A thread-safe TTL cache bounded by entry count and by the bytes of its entries.

    Least recently used entries go first when either bound is reached; an entry past its
    TTL is never returned. ``timer`` is injectable for tests. Claims are always granted:
    one process's misses are already coalesced by the cache middleware.

    Besides JSON text (``get``/``set``, as every store), it keeps values as they are
    (``keep``/``kept``): the cache middleware's answers, each with the size in bytes its
    caller counts for it (the middleware counts an answer's text, tool calls and vectors as
    held in memory, ADR 0031). ``kept`` returns either kind; ``get`` only text.
    """

    keeps_answers = True

    def __init__(self, *, max_entries: int = 10_000, max_bytes: int = 64 * 1024 * 1024,
                 timer: Callable[[], float] = time.monotonic) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._timer = timer
        self._lock = threading.Lock()
        # key -> (value, expires at, bytes), least recently used first. An expired entry is
        # dropped when read, when it reaches the front, or when the bounds push it out.
        self._entries: collections.OrderedDict[str, tuple[object, float, int]] = collections.OrderedDict()
        self._bytes = 0

    async def get(self, key: str) -> str | None:
        found = self.kept(key)
        return found if type(found) is str else None

    async def set(self, key: str, value: str, ttl_s: float) -> None:
        self.keep(key, value, len(value), ttl_s)  # the middleware writes ASCII-only JSON: characters are bytes

    async def delete(self, key: str) -> None:
        with self._lock:
            self._drop(key)

    def kept(self, key: str) -> object | None:
        """What ``key`` holds, text or a kept value, or None when absent or expired (not awaited)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if not self._timer() < entry[1]:
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def keep(self, key: str, value: object, size: int, ttl_s: float) -> None:
        """Hold ``value`` under ``key`` for ``ttl_s`` seconds, counted as ``size`` bytes (not awaited)."""
        size += _ENTRY_OVERHEAD
        if size > self.max_bytes:
            return  # larger than the whole cache: not worth evicting everything for
        now = self._timer()
        with self._lock:
            self._drop(key)
            self._entries[key] = (value, now + ttl_s, size)
            self._bytes += size
            entries = self._entries
            # The bounds first, least recently used first; then whatever has expired at the front.
            while entries and (len(entries) > self.max_entries or self._bytes > self.max_bytes
                               or not now < next(iter(entries.values()))[1]):
                self._bytes -= entries.popitem(last=False)[1][2]

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry[2]

    @property
    def grants_every_claim(self) -> bool:
        """True: the cache middleware need not ask for claims (unless a subclass hands them out)."""
        return type(self).claim is MemoryCacheStore.claim

    async def claim(self, key: str, ttl_s: float) -> str | None:
        return ""

    async def unclaim(self, key: str, token: str) -> None:
        return None

    @property
    def entries(self) -> int:
        """The entries not yet expired."""
        with self._lock:
            self._purge()
            return len(self._entries)

    @property
    def bytes(self) -> int:
        """The bytes counted for the entries not yet expired."""
        with self._lock:
            self._purge()
            return self._bytes

    def _purge(self) -> None:
        now = self._timer()
        for key in [k for k, entry in self._entries.items() if not now < entry[1]]:
            self._drop(key)


_ENTRY_OVERHEAD = 128  # the key (a 64-character digest and a prefix) and bookkeeping
