"""A stream's rate-limit hint: read from its answer's headers at opening, handed out on its first chunk."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from provmw.responses import ChatChunk, RateLimitHint

__all__ = ["OpeningHint"]


class OpeningHint:
    """Pass ``headers`` as ``post_sse_with_headers``' ``on_headers``; ``first`` puts the hint ``parse``
    read from them on the first chunk it is given, and passes every later chunk as it is."""

    __slots__ = ("_hint", "_parse")

    def __init__(self, parse: Callable[[Mapping[str, str]], RateLimitHint | None]) -> None:
        self._parse = parse
        self._hint: RateLimitHint | None = None

    def headers(self, headers: Mapping[str, str]) -> None:
        self._hint = self._parse(headers)

    def first(self, chunk: ChatChunk) -> ChatChunk:
        hint = self._hint
        if hint is None:
            return chunk
        self._hint = None
        return attrs.evolve(chunk, rate_limit=hint)
