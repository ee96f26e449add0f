"""Streamed answers: the pieces adapters assemble and the stream a caller reads.

``ToolCallAssembler`` is for adapters: a provider streams each tool call in pieces (its id
and name first, then its arguments as JSON text cut anywhere); the assembler joins them by
call id, then by index, and hands out complete calls whose arguments are whole JSON.
"""

from __future__ import annotations

import json

import attrs

from provmw.errors import InvalidDataError
from provmw.messages import ToolCall

__all__ = ["ToolCallAssembler"]


@attrs.define
class _Pieces:
    id: str | None
    name: str | None
    arguments: list[str] = attrs.Factory(list)


class ToolCallAssembler:
    """Joins streamed tool-call pieces into complete ``ToolCall``s, in the order they began.

    A piece that names an id belongs to that id's call (a new id begins a new call, even at
    an index already used, as some servers stream parallel calls); a piece without one
    belongs to the call last begun at its ``index``.
    """

    def __init__(self) -> None:
        self._calls: list[_Pieces] = []
        self._by_id: dict[str, _Pieces] = {}
        self._by_index: dict[int, _Pieces] = {}

    def add(self, index: int, *, id: str | None = None, name: str | None = None, arguments: str = "") -> None:
        """One piece of the call at ``index``: any of its id, its name, a piece of its arguments."""
        call = self._by_id.get(id) if id else self._by_index.get(index)
        if call is None:
            call = _Pieces(id or None, name or None)
            self._calls.append(call)
            if id:
                self._by_id[id] = call
        self._by_index[index] = call
        call.name = call.name or name or None
        if arguments:
            call.arguments.append(arguments)

    def calls(self) -> tuple[ToolCall, ...]:
        """The complete calls; ``InvalidDataError`` names a call without id or name, or whose
        arguments are not one JSON value (empty arguments are ``{}``)."""
        return tuple(_complete(i, call) for i, call in enumerate(self._calls))


def _complete(position: int, call: _Pieces) -> ToolCall:
    where = f"streamed tool call {position}"
    if not call.id or not call.name:
        raise InvalidDataError(f"{where} has no {'id' if not call.id else 'name'}")
    arguments = "".join(call.arguments).strip() or "{}"
    try:
        json.loads(arguments)
    except ValueError:
        raise InvalidDataError(f"{where} ({call.name!r}): its arguments are not complete JSON") from None
    return ToolCall(id=call.id, name=call.name, arguments=arguments)
