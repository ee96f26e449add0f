"""The cache layer over a store of text, pinned where the mutation run found it unchecked (docs/testing.md)."""

from __future__ import annotations

from provmw.testing import ScriptedNext
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
