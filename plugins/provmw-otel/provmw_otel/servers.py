"""Which server a call span names: the attempt layer notes each attempt's server in a record
the call layer put in the OpenTelemetry context, and the call layer reads it when the call ends.

The context carries it because it is what already joins the two layers' spans, across every
layer between them and any task they start (a hedge's attempts share the record); a call span
that is not recorded puts none there, so nothing is noted for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import context
from opentelemetry.context import Context

__all__ = ["Servers", "carrying", "noted"]

Server = Mapping[str, Any]
_KEY = context.create_key("provmw_otel.servers")
_NONE: Server = {}


class Servers:
    """The servers one call's attempts went to: each answering configuration's, and the last one's."""

    __slots__ = ("_answered", "last")

    def __init__(self) -> None:
        # By configuration, not "the last that answered": a hedge's losing attempt may answer
        # after the one whose answer the call returned.
        self._answered: dict[str, Server] = {}
        self.last: Server = _NONE

    def ended(self, configuration: str, server: Server, *, answered: bool) -> None:
        """An attempt of ``configuration`` to ``server`` ended (a stream's: opened)."""
        self.last = server
        if answered:
            self._answered[configuration] = server

    def serving(self, served_by: str) -> Server:
        """The server of the latest attempt of ``served_by`` that answered; none when this call
        reached none for it (an answer from the cache)."""
        return self._answered.get(served_by, _NONE)


def carrying(servers: Servers, parent: Context) -> Context:
    """``parent`` with ``servers`` for the attempts below to note their servers in."""
    return context.set_value(_KEY, servers, parent)


def noted() -> Servers | None:
    """The current call's record, if its span is recorded."""
    found = context.get_value(_KEY)
    return found if isinstance(found, Servers) else None
