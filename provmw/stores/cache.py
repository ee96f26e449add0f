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

import threading
import time
from collections.abc import Callable
from typing import Protocol

import cachetools

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
        self.max_entries = max_entries
        self._lock = threading.Lock()
        # Each entry is (value, ttl_s, bytes).
        self._entries: cachetools.TLRUCache[str, tuple[object, float, int]] = cachetools.TLRUCache(
            maxsize=max_bytes, ttu=_expires, timer=timer, getsizeof=_size)

    async def get(self, key: str) -> str | None:
        found = self.kept(key)
        return found if type(found) is str else None

    async def set(self, key: str, value: str, ttl_s: float) -> None:
        self.keep(key, value, len(value), ttl_s)  # the middleware writes ASCII-only JSON: characters are bytes

    def kept(self, key: str) -> object | None:
        """What ``key`` holds, text or a kept value, or None when absent or expired (not awaited)."""
        with self._lock:
            found = self._entries.get(key)
        return None if found is None else found[0]

    def keep(self, key: str, value: object, size: int, ttl_s: float) -> None:
        """Hold ``value`` under ``key`` for ``ttl_s`` seconds, counted as ``size`` bytes (not awaited)."""
        entry = (value, ttl_s, size + _ENTRY_OVERHEAD)
        if entry[2] > self._entries.maxsize:
            return  # larger than the whole cache: not worth evicting everything for
        with self._lock:
            self._entries[key] = entry
            while len(self._entries) > self.max_entries:
                self._entries.popitem()

    async def delete(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

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
        with self._lock:
            self._entries.expire()
            return len(self._entries)

    @property
    def bytes(self) -> int:
        with self._lock:
            self._entries.expire()
            return int(self._entries.currsize)


def _expires(key: str, value: tuple[object, float, int], now: float) -> float:
    return now + value[1]


_ENTRY_OVERHEAD = 128  # the key (a 64-character digest and a prefix) and bookkeeping


def _size(value: tuple[object, float, int]) -> int:
    return value[2]
