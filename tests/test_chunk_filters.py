"""Chunk filters (ADR 0005): a layer's filter sees every chunk before the caller, may rewrite, hold or refuse."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import pytest

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import GuardRefusedError
from provmw.manager import ServiceManager
from provmw.pipeline import Next, R
from provmw.plugins import PluginHost
from provmw.responses import ChatChunk
from provmw.settings import Settings
from provmw.streams import ChunkFilter, OpenedStream, StreamEnd
from provmw.testing import FakeProvider
from tests.conftest import openai_config


class Upper:
    def chunk(self, chunk: ChatChunk) -> Sequence[ChatChunk]:
        return (attrs.evolve(chunk, text=chunk.text.upper()),)

    def end(self) -> Sequence[ChatChunk]:
        return ()


class HoldAll:
    """Holds every text chunk, and hands the text on as one chunk with the last."""

    def __init__(self) -> None:
        self.held: list[str] = []
        self.ends = 0

    def chunk(self, chunk: ChatChunk) -> Sequence[ChatChunk]:
        self.held.append(chunk.text)
        if chunk.finish_reason is None:
            return ()
        text, self.held = "".join(self.held), []
        return (attrs.evolve(chunk, text=text),)

    def end(self) -> Sequence[ChatChunk]:
        self.ends += 1
        return (ChatChunk(text="".join(self.held)),) if self.held else ()


class Refuse:
    def chunk(self, chunk: ChatChunk) -> Sequence[ChatChunk]:
        if "three" in chunk.text:
            raise GuardRefusedError("refused by rule 'no-three'", rule="no-three", stage="output")
        return (chunk,)

    def end(self) -> Sequence[ChatChunk]:
        return ()


class Filtering:
    """Registers its filters at opening, and notes each end."""

    def __init__(self, *filters: ChunkFilter, name: str = "filtering", priority: int = 825) -> None:
        self.filters, self.name, self.priority = filters, name, priority
        self.ends: list[StreamEnd] = []

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        response = await next(config)
        if isinstance(response, OpenedStream):
            for chunk_filter in self.filters:
                response.filter_chunks(chunk_filter)
            response.on_end(self._ended)
        return response

    async def _ended(self, end: StreamEnd) -> None:
        self.ends.append(end)


def settings(fake: FakeProvider) -> Settings:
    return Settings(configurations={"oa": openai_config(fake)}, default="oa")


async def read(fake: FakeProvider, host: PluginHost, layer: Filtering, text: str) -> list[ChatChunk]:
    async with ServiceManager(settings(fake), host=host, middleware=[layer]) as manager:
        return [chunk async for chunk in manager.stream_chat(text)]


async def test_a_filter_rewrites_every_chunk_the_caller_gets(fake: FakeProvider, builtin_only: PluginHost) -> None:
    chunks = await read(fake, builtin_only, Filtering(Upper()), "one two three")
    assert "".join(c.text for c in chunks).strip() == "ECHO: ONE TWO THREE"


async def test_what_a_filter_holds_comes_with_the_last_chunk(fake: FakeProvider, builtin_only: PluginHost) -> None:
    hold = HoldAll()
    chunks = await read(fake, builtin_only, Filtering(hold), "one two three")
    assert [c.text.strip() for c in chunks] == ["echo: one two three"]
    assert chunks[0].finish_reason is not None and hold.ends == 1


async def test_filters_apply_inner_layers_first(fake: FakeProvider, builtin_only: PluginHost) -> None:
    inner, outer = Filtering(HoldAll(), name="inner", priority=100), Filtering(Upper(), name="outer", priority=900)
    async with ServiceManager(settings(fake), host=builtin_only, middleware=[inner, outer]) as manager:
        chunks = [chunk async for chunk in manager.stream_chat("a b")]
    assert [c.text.strip() for c in chunks] == ["ECHO: A B"]


async def test_a_filters_refusal_reaches_the_caller_as_raised(fake: FakeProvider, builtin_only: PluginHost) -> None:
    layer = Filtering(Refuse())
    with pytest.raises(GuardRefusedError) as caught:
        await read(fake, builtin_only, layer, "one two three four")
    assert caught.value.rule == "no-three"


async def test_the_end_runs_once_after_a_filters_refusal(fake: FakeProvider, builtin_only: PluginHost) -> None:
    layer = Filtering(Refuse())
    with pytest.raises(GuardRefusedError):
        await read(fake, builtin_only, layer, "one two three four")
    (end,) = layer.ends
    assert isinstance(end.error, GuardRefusedError) and end.response.usage.output_tokens > 0


async def test_the_end_sees_what_the_provider_sent(fake: FakeProvider, builtin_only: PluginHost) -> None:
    layer = Filtering(Upper())
    await read(fake, builtin_only, layer, "one two")
    assert layer.ends[0].response.text.strip() == "echo: one two"


async def test_what_a_filter_holds_goes_out_before_a_cut_streams_error(fake: FakeProvider,
                                                                       builtin_only: PluginHost) -> None:
    from provmw.errors import StreamInterruptedError
    from provmw.testing import Fault

    fake.script(Fault(cut_stream_after=4))
    hold = HoldAll()
    received: list[str] = []

    async def read_all() -> None:
        async with ServiceManager(settings(fake), host=builtin_only, middleware=[Filtering(hold)]) as manager:
            async for chunk in manager.stream_chat("one two three four five six"):
                received.append(chunk.text)

    with pytest.raises(StreamInterruptedError):
        await read_all()
    assert hold.ends == 1 and "".join(received).startswith("echo: one")
