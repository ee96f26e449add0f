"""Which plugin contributed a middleware object, remembered for one error message.

The pipeline is built from plugins' contributions and an application's own middleware
(``ServiceManager(middleware=[...])``) as one list of objects; when two share a name,
``DuplicateMiddlewareError`` should say where each came from. References are weak, so a
remembered middleware is never kept alive by this record.
"""

from __future__ import annotations

import weakref

__all__ = ["contributed_by", "remember"]

_CONTRIBUTED: dict[int, tuple[weakref.ref[object], str]] = {}


def remember(middleware: object, plugin: str) -> None:
    """Note that ``plugin`` contributed ``middleware``, for as long as that object lives."""
    key = id(middleware)
    try:
        ref = weakref.ref(middleware, lambda _, key=key: _CONTRIBUTED.pop(key, None))  # type: ignore[misc]
    except TypeError:  # an object without weak references: its errors name no plugin
        return
    _CONTRIBUTED[key] = (ref, plugin)


def contributed_by(middleware: object) -> str | None:
    """The plugin that contributed ``middleware``, or None (the application's own, or unknown)."""
    found = _CONTRIBUTED.get(id(middleware))
    return found[1] if found is not None and found[0]() is middleware else None
