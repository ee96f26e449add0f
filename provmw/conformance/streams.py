"""Conformance of streams: text then a last chunk with finish and usage, tool calls whole, and
every way a stream goes wrong (an error event, a malformed event, a cut, a clean end before the
documented one) raising instead of passing for a short answer."""

from __future__ import annotations

import json

import pytest

from provmw.conformance.base import HELLO, TWO_CITIES, ConformanceBase
from provmw.errors import MalformedResponseError, ProviderConnectionError, ProviderError, RateLimitError
from provmw.http import HttpClient
from provmw.testing import FakeProvider, Fault

__all__ = ["StreamTests"]


class StreamTests(ConformanceBase):
    """What ``stream_chat`` yields, and what it raises."""

    async def test_stream_gives_text_then_a_last_chunk_with_finish_and_usage(
            self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("streaming")
        chunks = await self.stream(fake, http)
        assert "".join(c.text for c in chunks).strip() == "echo: hello world"
        assert chunks[-1].finish_reason == "stop"
        assert chunks[-1].usage is not None
        assert (chunks[-1].usage.input_tokens, chunks[-1].usage.output_tokens) == (2, 3)

    async def test_a_stream_counts_the_cache_on_its_last_chunk(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("streaming")
        raw, expected = self._usage_case()
        fake.script(Fault(usage=raw))
        assert (await self.stream(fake, http))[-1].usage == expected

    async def test_a_stream_gives_each_tool_call_whole(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("streaming")
        self.needs("tools")
        chunks = await self.stream(fake, http, TWO_CITIES)
        calls = [call for chunk in chunks for call in chunk.tool_calls]
        assert [(c.name, list(json.loads(c.arguments).values())) for c in calls] == [
            ("weather", ["Paris"]), ("weather", ["London"])]
        assert len({c.id for c in calls}) == 2
        assert chunks[-1].finish_reason == "tool_calls"

    async def test_events_split_across_reads_still_parse(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("streaming")
        fake.script(Fault(split_frames=True))  # every event arrives a byte or two a read
        chunks = await self.stream(fake, http)
        assert "".join(c.text for c in chunks).strip() == "echo: hello world"
        assert chunks[-1].finish_reason == "stop"
        assert chunks[-1].usage is not None

    async def test_an_error_event_before_any_content_raises_its_mapped_error(
            self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("streaming")
        fault, error = self.stream_error
        fake.script(fault)
        with pytest.raises(ProviderError) as caught:
            await anext(self.adapter.stream_chat(http, self.config(fake), HELLO))
        assert type(caught.value) is error

    async def test_a_malformed_event_is_a_malformed_response(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("streaming")
        fake.script(Fault(malformed_after=1))
        with pytest.raises(MalformedResponseError):
            await self.stream(fake, http)

    async def test_a_cut_stream_raises_instead_of_a_short_answer(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("streaming")
        fake.script(Fault(cut_stream_after=3))
        with pytest.raises((ProviderConnectionError, MalformedResponseError)):
            await self.stream(fake, http)

    @pytest.mark.parametrize("withheld", [1, 2, 3])
    async def test_a_stream_that_ends_before_its_last_event_raises(
            self, fake: FakeProvider, http: HttpClient, withheld: int) -> None:
        """An end marker ([DONE], message_stop) or a finish event never sent: the stream ends
        cleanly, without an error or a cut, and must still not pass for a short answer."""
        self.needs("streaming")
        fake.script(Fault(withhold_last=withheld))
        with pytest.raises((ProviderConnectionError, MalformedResponseError)):
            await self.stream(fake, http)

    async def test_a_stream_error_status_raises_before_any_chunk(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("streaming")
        fake.script(Fault(status=429, headers={"retry-after": "3"}))
        with pytest.raises(RateLimitError) as caught:
            await anext(self.adapter.stream_chat(http, self.config(fake), HELLO))
        assert caught.value.retry_after_s == 3.0
