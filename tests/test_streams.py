"""The stream pieces: tool calls assembled whole, and an opened stream's end run exactly once."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.errors import InvalidDataError, MalformedResponseError, ProviderConnectionError, StreamInterruptedError
from provmw.responses import ChatChunk, Usage
from provmw.streams import OpenedStream, StreamEnd, ToolCallAssembler, open_stream


def test_pieces_join_by_id_then_by_index() -> None:
    calls = ToolCallAssembler()
    calls.add(0, id="a", name="weather", arguments='{"ci')
    calls.add(1, id="b", name="weather", arguments='{"city": "Rome"}')
    calls.add(0, arguments='ty": "Paris"}')
    assert [(c.id, c.name, c.parsed_arguments()) for c in calls.calls()] == [
        ("a", "weather", {"city": "Paris"}), ("b", "weather", {"city": "Rome"})]


def test_a_new_id_at_a_used_index_is_a_new_call() -> None:
    calls = ToolCallAssembler()
    calls.add(0, id="a", name="f", arguments="{}")
    calls.add(0, id="b", name="f", arguments="{}")
    assert [c.id for c in calls.calls()] == ["a", "b"]


def test_arguments_that_are_not_whole_json_are_refused() -> None:
    calls = ToolCallAssembler()
    calls.add(0, id="a", name="f", arguments='{"city": ')
    with pytest.raises(InvalidDataError, match="not complete JSON"):
        calls.calls()


def test_empty_arguments_are_an_empty_object() -> None:
    calls = ToolCallAssembler()
    calls.add(0, id="a", name="f")
    assert calls.calls()[0].arguments == "{}"


@given(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=8), max_size=4),
       st.lists(st.integers(1, 9), max_size=12))
def test_arguments_cut_anywhere_come_back_whole(arguments: dict[str, object], cuts: list[int]) -> None:
    text, calls, start = json.dumps(arguments), ToolCallAssembler(), 0
    calls.add(0, id="a", name="f")
    for size in cuts:
        calls.add(0, arguments=text[start:start + size])
        start += size
    calls.add(0, arguments=text[start:])
    assert json.loads(calls.calls()[0].arguments) == arguments


async def chunks_of(*items: ChatChunk | BaseException) -> AsyncIterator[ChatChunk]:
    for item in items:
        if isinstance(item, BaseException):
            raise item
        yield item


async def opened(*items: ChatChunk | BaseException, idle_s: float = 5.0) -> tuple[OpenedStream, list[StreamEnd]]:
    stream = await open_stream(chunks_of(*items), provider="p", model="m", served_by="cfg", first_chunk_s=5.0,
                               idle_s=idle_s, price=None, estimated_input_tokens=7, max_output_tokens=None,
                               scrub=lambda exc: None)
    ends: list[StreamEnd] = []

    async def on_end(end: StreamEnd) -> None:
        ends.append(end)

    stream.on_end(on_end)
    return stream, ends


USAGE = Usage(input_tokens=3, output_tokens=2)


async def test_a_completed_stream_ends_once_with_the_reported_usage() -> None:
    stream, ends = await opened(ChatChunk(text="a "), ChatChunk(text="b"), ChatChunk(finish_reason="stop", usage=USAGE))
    assert [c.text async for c in stream.chunks()] == ["a ", "b", ""]
    [end] = ends
    assert (end.completed, end.response.text, end.response.usage, end.usage_estimated) == (True, "a b", USAGE, False)


async def test_a_caller_who_breaks_ends_it_once_as_abandoned_with_an_estimate() -> None:
    stream, ends = await opened(ChatChunk(text="a"), ChatChunk(text="b"), ChatChunk(finish_reason="stop"))
    chunks = stream.chunks()
    async for _ in chunks:
        break
    await chunks.aclose()
    await chunks.aclose()
    [end] = ends
    assert (end.abandoned, end.usage_estimated, end.response.usage.input_tokens) == (True, True, 7)


async def test_an_iterator_dropped_unclosed_still_ends_once() -> None:
    stream, ends = await opened(ChatChunk(text="a"), ChatChunk(text="b"))
    chunks = stream.chunks()
    await anext(chunks)
    del chunks
    gc.collect()
    for _ in range(5):
        await asyncio.sleep(0)
    assert [end.abandoned for end in ends] == [True]


async def test_a_failure_after_the_first_chunk_is_an_interruption_with_its_cause() -> None:
    stream, ends = await opened(ChatChunk(text="a"), ProviderConnectionError("dropped", provider="p", model="m"))
    with pytest.raises(StreamInterruptedError, match="after 1 chunk") as caught:
        _ = [c async for c in stream.chunks()]
    assert isinstance(caught.value.__cause__, ProviderConnectionError)
    assert isinstance(ends[0].error, ProviderConnectionError)


async def test_a_stream_that_ends_before_any_content_does_not_open() -> None:
    with pytest.raises(MalformedResponseError, match="before any content"):
        await opened(ChatChunk(usage=USAGE))


async def test_a_failing_callback_does_not_keep_the_others_from_the_end() -> None:
    stream, ends = await opened(ChatChunk(text="a"), ChatChunk(finish_reason="stop"))

    async def broken(end: StreamEnd) -> None:
        raise RuntimeError("store down")

    stream.on_end(broken)
    later: list[StreamEnd] = []

    async def after(end: StreamEnd) -> None:
        later.append(end)

    stream.on_end(after)
    _ = [c async for c in stream.chunks()]
    assert len(ends) == len(later) == 1


async def slow_to_close() -> AsyncIterator[ChatChunk]:
    try:
        for text in ("a", "b", "c"):
            yield ChatChunk(text=text)
    finally:
        await asyncio.sleep(0.05)  # an adapter whose cleanup awaits


async def test_a_reader_cancelled_while_the_stream_closes_still_runs_the_end() -> None:
    stream = await open_stream(slow_to_close(), provider="p", model="m", served_by="cfg", first_chunk_s=5.0,
                               idle_s=5.0, price=None, estimated_input_tokens=7, max_output_tokens=None,
                               scrub=lambda exc: None)
    ends: list[StreamEnd] = []

    async def on_end(end: StreamEnd) -> None:
        ends.append(end)

    stream.on_end(on_end)

    async def read_one() -> None:
        chunks = stream.chunks()
        await anext(chunks)
        await chunks.aclose()

    reader = asyncio.create_task(read_one())
    await asyncio.sleep(0.01)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    await asyncio.sleep(0.1)
    assert len(ends) == 1
