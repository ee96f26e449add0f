"""Maps keyed by names a caller can choose (ad-hoc models, configuration identifiers, base
URLs), bounded so that choosing many names cannot grow the process without limit.

A deployment names a handful of configurations and models; :data:`MAX_NAMES` is far above
that, so only a caller inventing names ever reaches it, and then the least recently used
entries go first.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["MAX_NAMES", "KeepingLRU"]

MAX_NAMES = 1024

K = TypeVar("K")
V = TypeVar("V")


def _keep_none(value: object) -> bool:
    return False


class KeepingLRU(collections.OrderedDict[K, V]):
    """An LRU map that, when full, passes over the entries ``keep`` holds on to (an open
    breaker, a limiter with calls in flight) while another can go; only when every entry is
    kept does the least recently used one go anyway, so the bound always holds.

    ``used(key)`` reads an entry and makes it the most recently used; ``get`` and ``[key]``
    only read it (``OrderedDict``'s own, at C speed: every call reads a few of these maps).
    """

    def __init__(self, maxsize: int, keep: Callable[[V], bool] = _keep_none) -> None:
        super().__init__()
        self.maxsize = maxsize
        self._keep = keep

    def used(self, key: K) -> V | None:
        """The entry under ``key`` (None when absent), now the most recently used."""
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def __setitem__(self, key: K, value: V) -> None:
        if key not in self and len(self) >= self.maxsize:
            self._evict()  # first, so that the entry written now stays, the most recently used
        super().__setitem__(key, value)
        self.move_to_end(key)

    def _evict(self) -> None:
        for _ in range(len(self)):
            key, value = self.popitem(last=False)
            if not self._keep(value):
                return
            super().__setitem__(key, value)  # put back, now the most recently used
        self.popitem(last=False)

    # OrderedDict copies and pickles by calling the class with no arguments: this one needs its bound.
    def copy(self) -> KeepingLRU[K, V]:
        kept: KeepingLRU[K, V] = KeepingLRU(self.maxsize, self._keep)
        kept.update(self)
        return kept

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.maxsize, self._keep), None, None, iter(self.items())
