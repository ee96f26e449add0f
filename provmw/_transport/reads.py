"""Bounded reads: how much of an answer provmw will hold, and for how long a stream may idle.

A provider's answer is read in chunks and the read stops at the limit, so a hostile or
broken server (a 1 GiB body, an SSE line that never ends, keepalives for ever, a stream
that never ends) costs at most one limit of memory and one idle limit of time, then a
typed error. The limits are the ``[http]`` settings section::

    [http]
    max_body_bytes = 67108864     # 64 MiB: a unary answer's body
    max_event_bytes = 16777216    # 16 MiB: one SSE line, and the data of one SSE event
    max_stream_bytes = 268435456  # 256 MiB: a whole stream, every event together
    stream_idle_s = 60.0          # a stream with no event for this long is abandoned

Kept apart from ``provmw.http`` so the settings can name them without importing aiohttp.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from provmw.errors import ProviderError, ProviderTimeoutError, ResponseTooLargeError, StreamTooLargeError
from provmw.options import number, options_from

__all__ = ["ReadLimits", "ReadRefused", "check_stream_size", "read_capped"]

MIB = 1024 * 1024
# An error body is read for its code and message only; past this it is cut, not refused, so
# the status still decides the error class (a 429 stays a rate limit).
ERROR_BODY_BYTES = MIB


@attrs.frozen
class ReadLimits:
    """How much of an answer to hold and how long a stream may go without an event."""

    max_body_bytes: int = attrs.field(default=64 * MIB, validator=number(gt=0, integer=True))
    max_event_bytes: int = attrs.field(default=16 * MIB, validator=number(gt=0, integer=True))
    # Far above any real answer (128k output tokens stream in about 32 MB of OpenAI events):
    # a stop for a server that never ends, not a cap on what a model may say.
    max_stream_bytes: int = attrs.field(default=256 * MIB, validator=number(gt=0, integer=True))
    stream_idle_s: float = attrs.field(default=60.0, validator=number(gt=0))

    @classmethod
    def from_table(cls, table: Mapping[str, Any], source: str) -> ReadLimits:
        """The ``[http]`` section; an unknown key or a bad value names itself."""
        return options_from(cls, table, f"{source}: [http]")


class ReadRefused(Exception):
    """A read stopped at a limit; ``wire_errors`` turns it into the typed ``error(...)``."""

    def __init__(self, message: str, *, limit_bytes: int | None = None,
                 too_large: type[ResponseTooLargeError] = ResponseTooLargeError) -> None:
        super().__init__(message)
        self.message = message
        self.limit_bytes = limit_bytes
        self.too_large = too_large

    def error(self, provider: str, model: str) -> ProviderError:
        """The ``ProviderError`` to raise: too large (a byte limit) or a timeout (the idle limit)."""
        if self.limit_bytes is not None:
            return self.too_large(self.message, limit_bytes=self.limit_bytes, provider=provider, model=model)
        return ProviderTimeoutError(self.message, provider=provider, model=model)


class _Content(Protocol):
    async def readany(self) -> bytes: ...


async def read_capped(content: _Content, length: int | None, limit: int, *, truncate: bool = False) -> bytes:
    """Read a body of at most ``limit`` bytes; past it raise ``ReadRefused`` (or stop, if ``truncate``).

    ``length`` is the declared Content-Length: one over the limit is refused before any read.
    """
    if length is not None and length > limit and not truncate:
        raise _body_too_large(f"declares {length} bytes, over", limit)
    chunks: list[bytes] = []
    size = 0
    while chunk := await content.readany():
        size += len(chunk)
        if size > limit:
            if not truncate:
                raise _body_too_large("is longer than", limit)
            chunks.append(chunk[:len(chunk) - (size - limit)])
            break
        chunks.append(chunk)
    return b"".join(chunks)


def check_stream_size(size: int, limits: ReadLimits) -> None:
    """Refuse a stream once the ``size`` bytes read of it pass ``max_stream_bytes``."""
    if size > limits.max_stream_bytes:
        raise ReadRefused(f"the stream is longer than the limit of {limits.max_stream_bytes} bytes "
                          "([http] max_stream_bytes)", limit_bytes=limits.max_stream_bytes,
                          too_large=StreamTooLargeError)


def _body_too_large(how: str, limit: int) -> ReadRefused:
    return ReadRefused(f"response body {how} the limit of {limit} bytes ([http] max_body_bytes)",
                       limit_bytes=limit)
