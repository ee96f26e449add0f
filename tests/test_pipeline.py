from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.errors import DuplicateMiddlewareError, PluginError
from provmw.pipeline import MiddlewarePipeline, Next, R
from provmw.responses import CompletionResponse

CONFIG = ProviderConfig(identifier="primary", provider="openai", model="m")
OTHER = ProviderConfig(identifier="other", provider="openai", model="m2")


class Recorder:
    """A middleware that writes what it sees into a shared journal."""

    def __init__(self, name: str, priority: int, journal: list[Any]) -> None:
        self.name, self.priority, self.journal = name, priority, journal

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        self.journal.append((f"{self.name}:in", ctx, config.identifier))
        response = await next(config)
        self.journal.append((f"{self.name}:out", ctx, config.identifier))
        return response


class Substitute:
    name, priority = "substitute", 50

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        return await next(OTHER)


class ShortCircuit:
    name, priority = "short", 100

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        return CompletionResponse(provider="cache", model="m", text="cached", cached=True)  # type: ignore[return-value]


def ctx() -> ProviderCallContext:
    return ProviderCallContext(ProviderOperation.CHAT)


def terminal_into(journal: list[Any]) -> Any:
    async def terminal(config: ProviderConfig) -> CompletionResponse:
        journal.append(("terminal", None, config.identifier))
        return CompletionResponse(provider="p", model=config.model, text="done", served_by=config.identifier)

    return terminal


async def test_empty_pipeline_calls_the_terminal() -> None:
    journal: list[Any] = []
    response = await MiddlewarePipeline([]).run(ctx(), CONFIG, terminal_into(journal))
    assert response.text == "done"
    assert [j[0] for j in journal] == ["terminal"]


async def test_one_middleware_wraps_the_terminal() -> None:
    journal: list[Any] = []
    await MiddlewarePipeline([Recorder("a", 1, journal)]).run(ctx(), CONFIG, terminal_into(journal))
    assert [j[0] for j in journal] == ["a:in", "terminal", "a:out"]


async def test_three_compose_outer_middle_inner() -> None:
    journal: list[Any] = []
    layers = [Recorder("inner", 1, journal), Recorder("outer", 3, journal), Recorder("middle", 2, journal)]
    await MiddlewarePipeline(layers).run(ctx(), CONFIG, terminal_into(journal))
    assert [j[0] for j in journal] == ["outer:in", "middle:in", "inner:in", "terminal",
                                       "inner:out", "middle:out", "outer:out"]


async def test_short_circuit_never_calls_the_terminal() -> None:
    journal: list[Any] = []
    pipeline = MiddlewarePipeline([ShortCircuit(), Recorder("inner", 1, journal)])
    response = await pipeline.run(ctx(), CONFIG, terminal_into(journal))
    assert response.cached
    assert journal == []


async def test_substituted_configuration_reaches_inner_layers_and_terminal() -> None:
    journal: list[Any] = []
    pipeline = MiddlewarePipeline([Substitute(), Recorder("inner", 1, journal)])
    response = await pipeline.run(ctx(), CONFIG, terminal_into(journal))
    assert {j[2] for j in journal} == {"other"}
    assert response.served_by == "other"


async def test_every_layer_sees_the_same_context_object() -> None:
    journal: list[Any] = []
    call = ctx()
    layers = [Recorder(n, p, journal) for n, p in (("a", 3), ("b", 2), ("c", 1))]
    await MiddlewarePipeline(layers).run(call, CONFIG, terminal_into(journal))
    seen = [j[1] for j in journal if j[1] is not None]
    assert len(seen) == 6
    assert all(c is call for c in seen)


async def test_a_generator_works_as_the_middleware_list() -> None:
    journal: list[Any] = []

    def layers() -> Iterator[Recorder]:
        yield Recorder("b", 1, journal)
        yield Recorder("a", 2, journal)

    pipeline = MiddlewarePipeline(layers())
    assert pipeline.order == ("a", "b")
    await pipeline.run(ctx(), CONFIG, terminal_into(journal))
    assert [j[0] for j in journal][:2] == ["a:in", "b:in"]


@attrs.define
class Twice:
    name: str = "twice"
    priority: int = 1

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        await next(config)
        return await next(config)


async def test_next_may_be_called_several_times() -> None:
    journal: list[Any] = []
    await MiddlewarePipeline([Twice()]).run(ctx(), CONFIG, terminal_into(journal))
    assert [j[0] for j in journal] == ["terminal", "terminal"]


async def test_an_outer_layer_calling_next_twice_runs_the_inner_layers_twice() -> None:
    journal: list[Any] = []
    pipeline = MiddlewarePipeline([Twice(priority=3), Recorder("inner", 1, journal)])
    await pipeline.run(ctx(), CONFIG, terminal_into(journal))
    assert [j[0] for j in journal] == ["inner:in", "terminal", "inner:out"] * 2


async def test_concurrent_runs_each_carry_their_own_context_and_configuration() -> None:
    journal: list[Any] = []
    both_in = asyncio.Barrier(2)

    class Meet:
        name, priority = "meet", 2

        async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
            await both_in.wait()  # both calls are inside the pipeline before either goes on
            return await next(config)

    pipeline = MiddlewarePipeline([Recorder("outer", 3, journal), Meet(), Recorder("inner", 1, journal)])
    first, second = ctx(), ctx()
    answers = await asyncio.gather(pipeline.run(first, CONFIG, terminal_into(journal)),
                                   pipeline.run(second, OTHER, terminal_into(journal)))
    assert [a.served_by for a in answers] == ["primary", "other"]
    seen = {(c.call_id, identifier) for _, c, identifier in journal if c is not None}
    assert seen == {(first.call_id, "primary"), (second.call_id, "other")}


def test_ties_are_broken_by_name() -> None:
    journal: list[Any] = []
    pipeline = MiddlewarePipeline([Recorder("zeta", 5, journal), Recorder("alpha", 5, journal)])
    assert pipeline.order == ("alpha", "zeta")


@given(st.permutations([("a", 3), ("b", 3), ("c", 1), ("d", 10), ("e", -2), ("f", 3)]))
def test_resolved_order_is_the_same_for_every_permutation(specs: list[tuple[str, int]]) -> None:
    pipeline = MiddlewarePipeline(Recorder(n, p, []) for n, p in specs)
    assert pipeline.order == ("d", "a", "b", "f", "c", "e")


def test_duplicate_names_are_refused_at_build() -> None:
    with pytest.raises(DuplicateMiddlewareError, match="'a'"):
        MiddlewarePipeline([Recorder("a", 1, []), Recorder("a", 2, [])])


def test_non_async_handle_is_refused_at_build_naming_it() -> None:
    class SyncHandle:
        name, priority = "blocking", 1

        def handle(self, ctx: Any, config: Any, next: Any) -> Any:
            return None

    with pytest.raises(PluginError, match="'blocking'.*async"):
        MiddlewarePipeline([SyncHandle()])


@pytest.mark.parametrize("priority", ["1", 1.5, None, True])
def test_non_int_priority_is_refused(priority: object) -> None:
    class Odd:
        name = "odd"

        async def handle(self, ctx: Any, config: Any, next: Any) -> Any:
            return None

    odd = Odd()
    odd.priority = priority  # type: ignore[attr-defined]
    with pytest.raises(PluginError, match="priority"):
        MiddlewarePipeline([odd])


def test_order_and_repr_show_the_resolved_order() -> None:
    pipeline = MiddlewarePipeline([Recorder("inner", 1, []), Recorder("outer", 9, [])])
    assert pipeline.order == ("outer", "inner")
    assert repr(pipeline) == "MiddlewarePipeline([outer(9), inner(1)])"


def test_order_is_computed_once_at_build() -> None:
    source = [Recorder("a", 1, []), Recorder("b", 2, [])]
    pipeline = MiddlewarePipeline(source)
    source[0].priority = 99
    assert pipeline.order == ("b", "a")


class Closing:
    """A layer holding resources, and reading one control."""

    priority = 10
    controls = frozenset({"closing_hint"})

    def __init__(self, name: str, closed: list[str]) -> None:
        self.name, self._closed = name, closed

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        return await next(config)

    async def aclose(self) -> None:
        self._closed.append(self.name)


def test_the_pipeline_knows_the_controls_its_layers_declare() -> None:
    pipeline = MiddlewarePipeline([Closing("a", []), Substitute()])
    assert pipeline.controls == {"closing_hint"}


async def test_the_pipeline_closes_the_layers_that_hold_resources_outermost_first() -> None:
    closed: list[str] = []
    outer = Closing("outer", closed)
    outer.priority = 20
    await MiddlewarePipeline([Closing("inner", closed), Substitute(), outer]).aclose()
    assert closed == ["outer", "inner"]
