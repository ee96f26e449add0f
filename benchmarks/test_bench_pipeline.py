"""Pipeline overhead against the floor: N nested async closures written by hand, and the same
N middleware called through hand-nested lambdas (``lambda c: m1.handle(ctx, c, lambda c: ...)``).

Both sides build their chain per call around a fresh terminal (the terminal captures the
call's payload, so a real chain cannot be built once), and both run 1,000 calls per round.
Goal: at N = 5 the pipeline costs at most 1.3x either floor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from benchmarks.conftest import run_batch
from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.messages import Message
from provmw.pipeline import MiddlewarePipeline, Next, R
from provmw.requests import ChatRequest
from provmw.responses import CompletionResponse

CALLS = 1_000
CONFIG = ProviderConfig(identifier="bench", provider="openai", model="m")
RESPONSE = CompletionResponse(provider="openai", model="m", text="x")
CTX = ProviderCallContext(ProviderOperation.CHAT)


class PassThrough:
    def __init__(self, n: int) -> None:
        self.name, self.priority = f"layer{n}", n

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        return await next(config)


async def terminal(config: ProviderConfig) -> CompletionResponse:
    return RESPONSE


class ReadingTerminal:
    """A terminal that reads the request from its context, as the manager's does."""

    def with_context(self, ctx: ProviderCallContext) -> ReadingTerminal:
        return self

    async def __call__(self, config: ProviderConfig, ctx: ProviderCallContext | None = None) -> CompletionResponse:
        return RESPONSE


class Rewrite:
    name, priority = "rewrite", 1_000  # outermost: every layer below is bound anew

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        return await next(config, ctx.with_request(REQUEST))


REQUEST = ChatRequest((Message.user("rewritten"),))


def floor_call(depth: int) -> Callable[[], Awaitable[Any]]:
    async def call() -> Any:
        async def innermost(config: ProviderConfig) -> CompletionResponse:
            return RESPONSE

        chain: Callable[[ProviderConfig], Awaitable[Any]] = innermost
        for _ in range(depth):
            def wrap(inner: Callable[[ProviderConfig], Awaitable[Any]]) -> Callable[[ProviderConfig], Awaitable[Any]]:
                async def layer(config: ProviderConfig) -> Any:
                    return await inner(config)
                return layer
            chain = wrap(chain)
        return await chain(CONFIG)

    return call


@pytest.mark.parametrize("depth", [0, 1, 5, 10])
def test_pipeline(benchmark: Any, loop: Any, depth: int) -> None:
    pipeline = MiddlewarePipeline(PassThrough(n) for n in range(depth))
    benchmark.group = f"pipeline N={depth}"
    benchmark(run_batch(loop, lambda: pipeline.run(CTX, CONFIG, terminal), CALLS))


@pytest.mark.parametrize("depth", [1, 5, 10])
def test_pipeline_to_a_reading_terminal(benchmark: Any, loop: Any, depth: int) -> None:
    """The manager's case: a terminal that reads the request (``with_context``), nobody rewriting."""
    pipeline = MiddlewarePipeline(PassThrough(n) for n in range(depth))
    benchmark.group = f"pipeline N={depth}"
    benchmark(run_batch(loop, lambda: pipeline.run(CTX, CONFIG, ReadingTerminal()), CALLS))


@pytest.mark.parametrize("depth", [5, 10])
def test_pipeline_with_an_outermost_rewrite(benchmark: Any, loop: Any, depth: int) -> None:
    """What a rewrite costs: the layers below it bound anew to the derived context (facts of a context
    without a rebuild path, so only the pipeline's part is measured)."""
    pipeline = MiddlewarePipeline([*(PassThrough(n) for n in range(depth - 1)), Rewrite()])
    benchmark.group = f"pipeline N={depth}"
    benchmark(run_batch(loop, lambda: pipeline.run(CTX, CONFIG, ReadingTerminal()), CALLS))


@pytest.mark.parametrize("depth", [0, 1, 5, 10])
def test_hand_written_floor(benchmark: Any, loop: Any, depth: int) -> None:
    benchmark.group = f"pipeline N={depth}"
    benchmark(run_batch(loop, floor_call(depth), CALLS))


def test_five_hand_nested_lambdas(benchmark: Any, loop: Any) -> None:
    m1, m2, m3, m4, m5 = (PassThrough(n) for n in range(5))

    def call() -> Awaitable[Any]:
        return m1.handle(CTX, CONFIG, lambda c: m2.handle(CTX, c, lambda c: m3.handle(
            CTX, c, lambda c: m4.handle(CTX, c, lambda c: m5.handle(CTX, c, terminal)))))

    benchmark.group = "pipeline N=5"
    benchmark(run_batch(loop, call, CALLS))
