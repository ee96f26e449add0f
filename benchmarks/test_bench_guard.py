"""What the guard (plugins/provmw-guard) costs: its layer on a 2 KB prompt with the default settings,
and its stream chunk filter per chunk. Goals: at most 50 µs a call, at most 2 µs a chunk.

Each round runs many calls (chunks) back to back; the time of one is the round's over their count.
The layer is measured around a ``next`` that answers at once, so the figure is the guard's own:
the input policies (secrets), the redaction, the rewritten context, and the answer's restoring.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from provmw_guard import GuardMiddleware, Redaction, StreamRestorer

from provmw.config import ProviderConfig
from provmw.messages import Message
from provmw.requests import ChatRequest
from provmw.responses import ChatChunk, CompletionResponse
from provmw.testing import call_context

CALLS, CHUNKS = 200, 1000
CONFIG = ProviderConfig(identifier="main", provider="openai", model="gpt-4o-mini")
PROSE = ("Our customer support team reviews every ticket carefully and answers within business hours; "
         "the summary below lists what the customer asked, what we tried, and what remains open. ")
ENTITIES = ("Write to ada.lovelace@example.com or call +44 20 7946 0958; the card on file is 4111 1111 1111 1111, "
            "refunds go to GB82 WEST 1234 5698 7654 32, and the login came from 192.168.1.20. ")
PROMPTS = {"prose": (PROSE * 12)[:2048], "six values": (ENTITIES + PROSE * 12)[:2048]}


@pytest.mark.parametrize("name", list(PROMPTS))
def test_the_layer_on_a_2kb_prompt(benchmark: Any, loop: asyncio.AbstractEventLoop, name: str) -> None:
    layer, ctx = GuardMiddleware(), call_context(request=ChatRequest((Message.user(PROMPTS[name]),)))
    answer = CompletionResponse(provider="openai", model="m", served_by="main", text="echo: <EMAIL_1> <PHONE_1>")

    async def next(config: ProviderConfig, new: Any = None) -> CompletionResponse:
        return answer

    async def calls() -> None:
        for _ in range(CALLS):
            await layer.handle(ctx, CONFIG, next)

    benchmark.group = f"guard layer, default settings, 2 KB prompt, {CALLS} calls a round"
    benchmark(lambda: loop.run_until_complete(calls()))
    if benchmark.stats is not None:  # None under --benchmark-disable (CI's smoke run)
        benchmark.extra_info["per_call_us"] = benchmark.stats.stats.min / CALLS * 1e6


def _chunks(kind: str) -> list[ChatChunk]:
    words = ["The ", "answer ", "is ", "ready, ", "and "] if kind == "words" else ["mail ", "<EMA", "IL_1> ", "now "]
    return [ChatChunk(text=words[i % len(words)]) for i in range(CHUNKS)]


@pytest.mark.parametrize("kind", ["words", "placeholders"])
def test_the_stream_filter_per_chunk(benchmark: Any, kind: str) -> None:
    redaction = Redaction()
    redaction.placeholder("ada@example.com", "EMAIL")
    chunks = _chunks(kind)

    def stream() -> None:
        restorer = StreamRestorer(redaction)
        for chunk in chunks:
            restorer.chunk(chunk)
        restorer.end()

    benchmark.group = f"guard stream filter, {CHUNKS} chunks a round"
    benchmark(stream)
    if benchmark.stats is not None:
        benchmark.extra_info["per_chunk_us"] = benchmark.stats.stats.min / CHUNKS * 1e6
