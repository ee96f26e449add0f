"""``wire_errors`` (a class since ADR 0037) translates inside a stream, and lets a stream's closing pass."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest

from provmw.errors import ProviderUnavailableError
from provmw.http import ErrorCodes, HttpStatusError, wire_errors

NO_CODES = ErrorCodes(extract=lambda body: (None, None))


async def stream(fail: BaseException) -> AsyncGenerator[int, None]:
    with wire_errors(NO_CODES, provider="p", model="m"):
        yield 1
        raise fail


async def test_an_error_inside_a_stream_is_translated_with_its_context_suppressed() -> None:
    original = HttpStatusError(503, b"", {})
    with pytest.raises(ProviderUnavailableError) as caught:
        async for _ in stream(original):
            pass
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert caught.value.__context__ is original


async def test_closing_a_stream_mid_block_is_not_translated() -> None:
    chunks = stream(HttpStatusError(503, b"", {}))
    assert await chunks.__anext__() == 1
    await chunks.aclose()  # GeneratorExit passes through __exit__ untouched
    with pytest.raises(StopAsyncIteration):
        await chunks.__anext__()
