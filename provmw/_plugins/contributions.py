"""What each hook must hand back, checked once where the plugin host collects it.

A plugin that returns garbage (a number instead of a list, a middleware without ``handle``,
a state backend missing a store) is named when the manager is built, not in a traceback
deep inside the first call that touches it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from provmw.errors import PluginError

__all__ = ["ADAPTER", "KEY_STORE", "MIDDLEWARE", "STATE_BACKEND", "USAGE_STORE", "Shape", "iterable_answer"]


def _name(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@attrs.frozen
class Shape:
    """The members a contribution must have, each with the test its value must pass."""

    what: str
    members: Mapping[str, Callable[[object], bool]]

    def check(self, value: object, plugin: str, hook: str) -> None:
        """Raise ``PluginError`` naming ``plugin`` unless ``value`` has every member."""
        wrong = [member for member, test in self.members.items() if not test(getattr(value, member, None))]
        if wrong:
            raise PluginError(f"plugin {plugin!r} returned from {hook} a value of type {type(value).__name__} "
                              f"that is not a {self.what}: {', '.join(wrong)} missing or of the wrong type")


def _methods(*names: str) -> dict[str, Callable[[object], bool]]:
    return dict.fromkeys(names, callable)


MIDDLEWARE = Shape("middleware", {"name": _name, "priority": _integer, "handle": callable})
ADAPTER = Shape("provider adapter", {"name": _name, **_methods("chat", "complete", "embed", "stream_chat")})
STATE_BACKEND = Shape("state backend", _methods("cache_store", "budget_store", "breaker_store", "rate_limiter",
                                                "aclose"))
USAGE_STORE = Shape("usage store", _methods("write", "records", "summary", "aclose"))
KEY_STORE = Shape("key store", _methods("create", "verify", "get", "list", "disable", "rotate", "set_budget",
                                        "budgets_for", "record_response", "response_owner", "aclose"))


def iterable_answer(result: Any, plugin: str, hook: str) -> list[Any]:
    """A hook's answer as a list; None is nothing. A string or mapping is refused: iterating one
    yields characters or keys, never contributions."""
    if result is None:
        return []
    if isinstance(result, (str, bytes, Mapping)) or not isinstance(result, Iterable):
        raise PluginError(f"plugin {plugin!r} returned from {hook} a value of type {type(result).__name__}, "
                          "not an iterable of contributions")
    return list(result)
