"""The cache layer over a store of text, pinned where the mutation run found it unchecked (docs/testing.md)."""

from __future__ import annotations

import attrs
import pytest

from provmw.context import ProviderOperation
from provmw.errors import ConfigurationError
from provmw.middleware.cache import CacheMiddleware, CacheOptions
from provmw.operations.audio import TranscriptionResponse
from provmw.responses import EmbeddingResponse, ProviderResponse
from provmw.stores.cache import MemoryCacheStore
from provmw.testing import ScriptedNext, call_context
from tests.middleware.test_cache import ANSWER, CONFIG, ctx, stored_key
from tests.middleware.test_cache_text_store import TextStore, layer
from tests.virtual_time import run_virtual


async def test_an_entry_read_again_and_again_is_the_same_hit_each_time() -> None:
    store, upstream = TextStore(), ScriptedNext(ANSWER)
    cache = layer(store)
    answers = [await cache.handle(ctx(), CONFIG, upstream) for _ in range(4)]  # a miss, then three hits
    assert [(a.text, a.cached) for a in answers] == [("42", False), ("42", True), ("42", True), ("42", True)]
    assert len(upstream.calls) == 1


class SpoiledWhileHeld(TextStore):
    """Another process holds the first claim and leaves, meanwhile, text under the key that is no answer."""

    async def claim(self, key: str, ttl_s: float) -> str | None:
        token = await super().claim(key, ttl_s)
        if token is None:
            self.entries[key] = ("{not json", 60.0)
        return token


def test_a_poller_drops_an_unreadable_entry_another_process_left() -> None:
    store = SpoiledWhileHeld(held=1)
    answer = run_virtual(layer(store).handle(ctx(no_store=True), CONFIG, ScriptedNext(ANSWER)))
    assert answer.text == "42" and stored_key() not in store.entries


async def counted(answer: ProviderResponse, operation: ProviderOperation = ProviderOperation.CHAT) -> int:
    """The bytes the memory store counts for ``answer`` once the cache kept it (its ``max_bytes`` bound)."""
    cache = CacheMiddleware(CacheOptions(operations=("chat", "embedding")))
    await cache.handle(ctx(operation=operation), CONFIG, ScriptedNext(answer))
    assert isinstance(cache.store, MemoryCacheStore)
    return cache.store.bytes


async def test_a_non_ascii_character_of_an_answer_counts_four_bytes_against_max_bytes() -> None:
    assert await counted(attrs.evolve(ANSWER, text="é" * 100)) - await counted(attrs.evolve(ANSWER, text="e" * 100)) \
        == 300


async def test_a_structured_answer_counts_four_times_its_text_against_max_bytes() -> None:
    plain = attrs.evolve(ANSWER, text='{"a":1}')
    text_and_object = len(plain.text) + 80
    assert await counted(attrs.evolve(plain, parsed={"a": 1})) - await counted(plain) == 3 * text_and_object


async def test_each_vector_of_an_embedding_counts_its_numbers_and_its_object_against_max_bytes() -> None:
    one = EmbeddingResponse(provider="openai", model="e", vectors=[[0.5, 1.0]])
    two = attrs.evolve(one, vectors=[[0.5, 1.0], [0.25, 2.0]])
    embedding = ProviderOperation.EMBEDDING
    assert await counted(two, embedding) - await counted(one, embedding) == 2 * 32 + 80


async def test_a_call_without_a_key_is_never_cached() -> None:
    cache, upstream = CacheMiddleware(CacheOptions(operations=("chat",))), ScriptedNext(ANSWER, ANSWER)
    keyless = call_context(deterministic=True)  # no digest: no cache key
    answers = [await cache.handle(keyless, CONFIG, upstream) for _ in range(2)]
    assert [a.cached for a in answers] == [False, False] and len(upstream.calls) == 2


async def test_a_call_that_skips_the_cache_goes_to_its_own_configuration() -> None:
    upstream = ScriptedNext(ANSWER)
    await CacheMiddleware(CacheOptions(operations=("chat",))).handle(ctx(no_cache=True), CONFIG, upstream)
    assert upstream.calls == [CONFIG]


async def test_the_memory_store_keeps_at_most_max_entries_answers() -> None:
    cache = CacheMiddleware(CacheOptions(operations=("chat",), max_entries=1))
    for caller in ("k1", "k2"):  # two callers: two keys
        await cache.handle(ctx(caller), CONFIG, ScriptedNext(ANSWER))
    assert isinstance(cache.store, MemoryCacheStore) and cache.store.entries == 1


def transcribed(text: str) -> TranscriptionResponse:
    return TranscriptionResponse(provider="openai", model="whisper-1", text=text)


async def kept_bytes(answer: ProviderResponse) -> int:
    """The bytes the memory store counts once the cache kept a transcription's ``answer``."""
    cache = CacheMiddleware(CacheOptions(operations=("transcription",)))
    await cache.handle(ctx(operation=ProviderOperation.TRANSCRIPTION), CONFIG, ScriptedNext(answer))
    assert isinstance(cache.store, MemoryCacheStore)
    return cache.store.bytes


async def test_an_answer_beyond_chat_is_kept_whole() -> None:
    assert await kept_bytes(transcribed("hello")) > 0


async def test_an_answer_beyond_chat_counts_four_bytes_a_character_of_its_json_against_max_bytes() -> None:
    assert await kept_bytes(transcribed("x" * 200)) - await kept_bytes(transcribed("x" * 100)) == 400


def test_operations_given_as_a_string_are_refused_saying_so() -> None:
    with pytest.raises(ConfigurationError) as refused:
        CacheOptions(operations="chat")
    assert str(refused.value) == "operations must be a list, got the string 'chat'"


def test_an_unknown_operation_is_refused_with_the_operations_there_are() -> None:
    with pytest.raises(ConfigurationError) as refused:
        CacheOptions(operations=["chatt"])
    assert str(refused.value).startswith("operations: 'chatt' is not one of chat, completion, embedding, ")


def test_shared_namespaces_given_as_a_string_are_refused_saying_so() -> None:
    with pytest.raises(ConfigurationError) as refused:
        CacheOptions(shared_namespaces="team")
    assert str(refused.value) == "shared_namespaces must be a list, got the string 'team'"
