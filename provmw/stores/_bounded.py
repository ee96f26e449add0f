"""Maps keyed by names a caller can choose (ad-hoc models, configuration identifiers, base
URLs), bounded so that choosing many names cannot grow the process without limit.

A deployment names a handful of configurations and models; :data:`MAX_NAMES` is far above
that, so only a caller inventing names ever reaches it, and then the least recently used
entries go first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import cachetools

__all__ = ["MAX_NAMES", "KeepingLRU"]

MAX_NAMES = 1024

K = TypeVar("K")
V = TypeVar("V")


class KeepingLRU(cachetools.LRUCache[K, V]):
    """An LRU map that, when full, passes over the entries ``keep`` holds on to (an open
    breaker, a limiter with calls in flight) while another can go; only when every entry is
    kept does the least recently used one go anyway, so the bound always holds."""

    def __init__(self, maxsize: int, keep: Callable[[V], bool]) -> None:
        super().__init__(maxsize)
        self._keep = keep

    def popitem(self) -> tuple[K, V]:
        for _ in range(len(self)):
            key, value = super().popitem()
            if not self._keep(value):
                return key, value
            super().__setitem__(key, value)  # put back, now the most recently used
        return super().popitem()
