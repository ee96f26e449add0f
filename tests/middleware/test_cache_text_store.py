"""The cache over a store of text (as a shared store holds it): compact JSON in, decoded answers out,
entries that change or do not fit dropped, claims taken for ``lock_s`` and given back."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from provmw.context import ProviderOperation
from provmw.errors import ProviderUnavailableError
from provmw.middleware.cache import CacheMiddleware, CacheOptions
from provmw.responses import CompletionResponse, EmbeddingResponse
from provmw.testing import ScriptedNext
from tests.middleware.test_cache import ANSWER, CONFIG, ctx, stored_key
from tests.polling import eventually
from tests.virtual_time import run_virtual

VECTORS = EmbeddingResponse(provider="openai", model="e", vectors=[[0.5, 1.0]])


class TextStore:
    """A store of JSON text with claims, as one shared by processes is; ``held`` claims are refused."""

    def __init__(self, held: int = 0) -> None:
        self.entries: dict[str, tuple[str, float]] = {}
        self.held = held
        self.claims: list[tuple[str, float]] = []
        self.unclaims: list[tuple[str, str]] = []
        self.claimed_at: list[float] = []

    async def get(self, key: str) -> str | None:
        return self.entries[key][0] if key in self.entries else None

    async def set(self, key: str, value: str, ttl_s: float) -> None:
        self.entries[key] = (value, ttl_s)

    async def delete(self, key: str) -> None:
        self.entries.pop(key, None)

    async def claim(self, key: str, ttl_s: float) -> str | None:
        self.claims.append((key, ttl_s))
        self.claimed_at.append(asyncio.get_running_loop().time())
        if self.held:
            self.held -= 1
            return None
        return "token-1"

    async def unclaim(self, key: str, token: str) -> None:
        self.unclaims.append((key, token))


def layer(store: TextStore) -> CacheMiddleware:
    return CacheMiddleware(CacheOptions(operations=("chat", "embedding"), ttl_s=60, lock_s=7), store=store)


async def test_a_miss_writes_compact_json_claimed_for_lock_s_and_given_back() -> None:
    store = TextStore()
    await layer(store).handle(ctx(), CONFIG, ScriptedNext(ANSWER))
    assert store.entries == {stored_key(): (json.dumps(ANSWER.to_dict(), separators=(",", ":")), 60)}
    assert (store.claims, store.unclaims) == ([(stored_key(), 7)], [(stored_key(), "token-1")])


async def test_an_entry_changed_by_another_process_is_read_again() -> None:
    store, upstream = TextStore(), ScriptedNext(ANSWER)
    middleware = layer(store)
    await middleware.handle(ctx(), CONFIG, upstream)
    assert (await middleware.handle(ctx(), CONFIG, upstream)).cached
    newer = CompletionResponse(provider="openai", model="m", text="43", finish_reason="stop")
    await store.set(stored_key(), json.dumps(newer.to_dict()), 60)
    hit = await middleware.handle(ctx(), CONFIG, upstream)
    assert (hit.text, hit.cached, len(upstream.calls)) == ("43", True, 1)


async def test_an_entry_of_another_operation_is_dropped_and_named_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    store = TextStore()
    key = stored_key()
    await store.set(key, json.dumps(ANSWER.to_dict()), 60)
    with caplog.at_level(logging.WARNING):
        answer = await layer(store).handle(ctx(operation=ProviderOperation.EMBEDDING), CONFIG, ScriptedNext(VECTORS))
    assert answer == VECTORS and not answer.cached
    assert f"dropping an unreadable entry {key[:24]} (a CompletionResponse under a embedding key)" in caplog.text


async def test_no_cache_goes_upstream_without_a_claim_and_stores_the_answer() -> None:
    store, upstream = TextStore(), ScriptedNext(ANSWER)
    await layer(store).handle(ctx(no_cache=True), CONFIG, upstream)
    assert (len(upstream.calls), store.claims) == (1, [])
    assert stored_key() in store.entries


def test_a_waiter_polls_at_doubling_intervals_up_to_a_quarter_second() -> None:
    store = TextStore(held=6)
    run_virtual(layer(store).handle(ctx(), CONFIG, ScriptedNext(ANSWER)))
    gaps = [round(b - a, 6) for a, b in zip(store.claimed_at, store.claimed_at[1:], strict=False)]
    assert gaps == [0.02, 0.04, 0.08, 0.16, 0.25, 0.25]


async def test_a_waiter_on_an_embedding_gets_the_entry_another_process_wrote() -> None:
    store, upstream = TextStore(held=1), ScriptedNext()
    waiting = asyncio.ensure_future(layer(store).handle(ctx(operation=ProviderOperation.EMBEDDING), CONFIG, upstream))
    assert await eventually(lambda: len(store.claims), lambda claims: claims > 0) == 1  # refused: it polls
    await store.set(stored_key(), json.dumps(VECTORS.to_dict()), 60)  # the other process answers
    hit = await waiting
    assert (hit.cached, hit.vectors, upstream.calls) == (True, VECTORS.vectors, [])


async def test_a_local_caller_behind_a_poller_gets_the_entry_another_process_wrote() -> None:
    store, upstream = TextStore(held=10**6), ScriptedNext()
    middleware = layer(store)
    poller = asyncio.ensure_future(middleware.handle(ctx(), CONFIG, upstream))
    assert await eventually(lambda: len(store.claims), lambda claims: claims > 0) == 1
    behind = asyncio.ensure_future(middleware.handle(ctx(), CONFIG, upstream))  # waits on the poller, no claim
    await asyncio.sleep(0)
    await store.set(stored_key(), json.dumps(ANSWER.to_dict()), 60)  # the other process answers
    assert [(hit.text, hit.cached) for hit in await asyncio.gather(poller, behind)] == [("42", True)] * 2
    assert upstream.calls == []
    await store.delete(stored_key())  # then the entry expires: nothing of that wait is left to answer
    store.held = 0
    assert not (await middleware.handle(ctx(), CONFIG, ScriptedNext(ANSWER))).cached


async def test_an_entry_gone_from_the_store_is_asked_for_again() -> None:
    store, upstream = TextStore(), ScriptedNext(ANSWER, ANSWER)
    middleware = layer(store)
    await middleware.handle(ctx(), CONFIG, upstream)
    await store.delete(stored_key())  # expired, or evicted
    assert not (await middleware.handle(ctx(), CONFIG, upstream)).cached
    assert len(upstream.calls) == 2


async def test_a_failed_call_gives_its_claim_back() -> None:
    store = TextStore()
    with pytest.raises(ProviderUnavailableError):
        await layer(store).handle(ctx(), CONFIG, ScriptedNext(ProviderUnavailableError("down", status=503)))
    assert (store.unclaims, store.entries) == ([(stored_key(), "token-1")], {})
