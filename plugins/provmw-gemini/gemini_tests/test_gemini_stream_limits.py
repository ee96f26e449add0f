"""A Gemini stream is bounded in its whole size like every stream read over ``provmw.http``."""

from __future__ import annotations

import pytest
from provmw_gemini import GeminiAdapter

from provmw.config import ProviderConfig
from provmw.errors import StreamTooLargeError
from provmw.http import HttpClient, ReadLimits
from provmw.messages import Message
from provmw.requests import ChatRequest
from provmw.testing import FakeProvider


async def test_a_stream_past_max_stream_bytes_is_a_stream_too_large_error(
        gemini_fake: FakeProvider, gemini: ProviderConfig) -> None:
    http = HttpClient(limits=ReadLimits(max_stream_bytes=512))
    request = ChatRequest((Message.user("one two three four five six seven eight nine ten"),))
    try:
        with pytest.raises(StreamTooLargeError, match=r"\[http\] max_stream_bytes") as caught:
            _ = [chunk async for chunk in GeminiAdapter().stream_chat(http, gemini, request)]
    finally:
        await http.aclose()
    assert (caught.value.limit_bytes, caught.value.provider) == (512, "gemini")
