"""The cache middleware: scoped hits, controls, what is never kept, single-flight, bad entries."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

import attrs
import pytest

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.errors import ConfigurationError, ContentPolicyError, ProviderError, ProviderUnavailableError
from provmw.manager import ServiceManager
from provmw.messages import ToolCall
from provmw.middleware.cache import CacheMiddleware, CacheOptions, _answer_bytes
from provmw.plugins import PluginHost
from provmw.responses import Attempt, CompletionResponse, EmbeddingResponse, Usage
from provmw.settings import Settings
from provmw.stores.cache import MemoryCacheStore
from provmw.stores.outage import GuardedCache
from provmw.testing import FakeProvider, Fault, ScriptedNext, call_context
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, LOOPBACK_ALLOWED, openai_config

CONFIG = ProviderConfig(identifier="p", provider="openai", model="m")
ANSWER = CompletionResponse(provider="openai", model="m", text="42", finish_reason="stop")


def ctx(key: str = "k1", operation: ProviderOperation = ProviderOperation.CHAT, deterministic: bool = True,
        **controls: Any) -> ProviderCallContext:
    # ``key`` stands for the caller; requests ending in the same character share a digest.
    return call_context(operation, digest="shared-" + key[-1], tenant=key, deterministic=deterministic,
                        controls=controls)


def stored_key(key: str = "k1", namespace: str = "default") -> str:
    """The store key the cache uses for ``ctx(key)``."""
    return f"{namespace}:{ctx(key).facts.cache_key}"


def cache(**options: Any) -> CacheMiddleware:
    return CacheMiddleware(CacheOptions(**{"operations": ("chat", "embedding"), **options}))


def entries(middleware: CacheMiddleware) -> int:
    assert isinstance(middleware.store, MemoryCacheStore)
    return middleware.store.entries


async def test_a_repeat_is_a_hit_marked_cached_and_skips_the_provider() -> None:
    middleware, inner = cache(), ScriptedNext(ANSWER, ANSWER)
    first = await middleware.handle(ctx(), CONFIG, inner)
    second = await middleware.handle(ctx(), CONFIG, inner)
    assert (first.cached, second.cached, len(inner.calls)) == (False, True, 1)
    assert (second.text, second.finish_reason) == ("42", "stop")


async def test_another_scope_is_a_miss() -> None:
    middleware, inner = cache(), ScriptedNext(ANSWER, ANSWER)
    await middleware.handle(ctx("tenant-a"), CONFIG, inner)
    assert not (await middleware.handle(ctx("tenant-b"), CONFIG, inner)).cached


async def test_a_shared_namespace_uses_the_unscoped_key() -> None:
    middleware, inner = cache(shared_namespaces=["public"]), ScriptedNext(ANSWER)
    await middleware.handle(ctx("tenant-a1", namespace="public"), CONFIG, inner)
    hit = await middleware.handle(ctx("tenant-b1", namespace="public"), CONFIG, inner)
    assert hit.cached and len(inner.calls) == 1


async def test_namespaces_do_not_share_entries() -> None:
    middleware, inner = cache(), ScriptedNext(ANSWER, ANSWER)
    await middleware.handle(ctx(namespace="a"), CONFIG, inner)
    assert not (await middleware.handle(ctx(namespace="b"), CONFIG, inner)).cached


async def test_chat_is_cached_only_when_listed_and_deterministic() -> None:
    for middleware, context in ((cache(), ctx(deterministic=False)), (cache(operations=["embedding"]), ctx())):
        inner = ScriptedNext(ANSWER, ANSWER)
        await middleware.handle(context, CONFIG, inner)
        await middleware.handle(context, CONFIG, inner)
        assert len(inner.calls) == 2


def test_the_default_caches_embeddings_only() -> None:
    assert CacheOptions().operations == ("embedding",)


async def test_no_cache_skips_the_read_but_stores_the_fresh_answer() -> None:
    middleware = cache()
    await middleware.handle(ctx(), CONFIG, ScriptedNext(ANSWER))
    inner = ScriptedNext(CompletionResponse(provider="openai", model="m", text="fresh", finish_reason="stop"))
    assert (await middleware.handle(ctx(no_cache=True), CONFIG, inner)).text == "fresh"
    assert (await middleware.handle(ctx(), CONFIG, ScriptedNext())).text == "fresh"


async def test_no_store_skips_the_write() -> None:
    middleware = cache()
    await middleware.handle(ctx(no_store=True), CONFIG, ScriptedNext(ANSWER))
    assert entries(middleware) == 0


async def test_the_ttl_control_sets_the_entry_lifetime() -> None:
    now = [0.0]
    middleware = CacheMiddleware(CacheOptions(operations=("chat",)), timer=lambda: now[0])
    await middleware.handle(ctx(ttl_s=5), CONFIG, ScriptedNext(ANSWER))
    now[0] = 4.9
    assert (await middleware.handle(ctx(), CONFIG, ScriptedNext())).cached
    now[0] = 5.0
    assert not (await middleware.handle(ctx(), CONFIG, ScriptedNext(ANSWER))).cached


@pytest.mark.parametrize("error", [ProviderUnavailableError("500", status=500),
                                   ContentPolicyError("filtered", status=400)], ids=["500", "content-policy"])
async def test_a_failure_reaches_the_caller_and_leaves_no_entry(error: ProviderError) -> None:
    middleware = cache()
    with pytest.raises(type(error)) as raised:
        await middleware.handle(ctx(), CONFIG, ScriptedNext(error))
    assert raised.value is error
    assert entries(middleware) == 0


@pytest.mark.parametrize("partial", [
    CompletionResponse(provider="openai", model="m", text="cut sh", finish_reason="length"),
    CompletionResponse(provider="openai", model="m", text="", finish_reason="content_filter"),
    CompletionResponse(provider="openai", model="m", text="?", finish_reason=None),
    EmbeddingResponse(provider="openai", model="m", vectors=[]),
], ids=["length", "content-filter-finish", "unknown-finish", "no-vectors"])
async def test_a_partial_answer_reaches_the_caller_and_leaves_no_entry(partial: Any) -> None:
    middleware = cache()
    assert await middleware.handle(ctx(), CONFIG, ScriptedNext(partial)) == partial
    assert entries(middleware) == 0


@pytest.mark.parametrize("value", ["", 3, None])
async def test_a_bad_namespace_control_names_itself(value: object) -> None:
    with pytest.raises(ConfigurationError, match="namespace"):
        await cache().handle(ctx(namespace=value), CONFIG, ScriptedNext())


@pytest.mark.parametrize("raw", ["{not json", json.dumps({"type": "completion"}), json.dumps([1, 2]),
                                 json.dumps({**EmbeddingResponse(provider="o", model="m", vectors=[[1.0]]).to_dict()}),
                                 "\x80\x04\x95pickle"], ids=["bad-json", "missing-fields", "a-list", "wrong-type",
                                                             "pickle-bytes"])
async def test_a_corrupt_entry_is_a_miss_logged_once(raw: str, caplog: pytest.LogCaptureFixture) -> None:
    middleware = cache()
    await middleware.store.set(stored_key(), raw, 60)
    first = await middleware.handle(ctx(no_store=True), CONFIG, ScriptedNext(ANSWER))
    second = await middleware.handle(ctx(), CONFIG, ScriptedNext(ANSWER))
    assert not first.cached and not second.cached
    assert caplog.text.count("dropping an unreadable entry") == 1


async def test_a_failing_store_degrades_to_misses_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    class BrokenStore:
        async def get(self, key: str) -> str | None:
            raise ConnectionError("store down")

        async def set(self, key: str, value: str, ttl_s: float) -> None:
            raise ConnectionError("store down")

        async def delete(self, key: str) -> None:
            raise ConnectionError("store down")

        async def claim(self, key: str, ttl_s: float) -> str | None:
            raise ConnectionError("store down")

        async def unclaim(self, key: str, token: str) -> None:
            raise ConnectionError("store down")

    middleware = CacheMiddleware(CacheOptions(operations=("chat",)), store=GuardedCache(BrokenStore()))
    for _ in range(3):
        assert (await middleware.handle(ctx(), CONFIG, ScriptedNext(ANSWER))).text == "42"
    assert caplog.text.count("the store failed") == 1


async def test_concurrent_identical_misses_make_one_upstream_call() -> None:
    middleware, gate, calls = cache(), asyncio.Event(), []

    async def slow(config: ProviderConfig) -> CompletionResponse:
        calls.append(config)
        await gate.wait()
        return ANSWER

    tasks = [asyncio.create_task(middleware.handle(ctx(), CONFIG, slow)) for _ in range(50)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks)
    assert len(calls) == 1 and sum(not r.cached for r in results) == 1


async def test_a_failing_leader_fails_every_waiter_and_caches_nothing() -> None:
    middleware, gate = cache(), asyncio.Event()
    error = ProviderUnavailableError("down", status=503)

    async def failing(config: ProviderConfig) -> CompletionResponse:
        await gate.wait()
        raise error

    tasks = [asyncio.create_task(middleware.handle(ctx(), CONFIG, failing)) for _ in range(20)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(r is error for r in results) and entries(middleware) == 0
    inner = ScriptedNext(ANSWER)
    await middleware.handle(ctx(), CONFIG, inner)
    assert len(inner.calls) == 1


async def test_a_cancelled_leader_lets_a_waiter_go_upstream() -> None:
    middleware, gate = cache(), asyncio.Event()

    async def hang(config: ProviderConfig) -> CompletionResponse:
        await gate.wait()
        return ANSWER

    leader = asyncio.create_task(middleware.handle(ctx(), CONFIG, hang))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(middleware.handle(ctx(), CONFIG, ScriptedNext(ANSWER)))
    await asyncio.sleep(0)
    leader.cancel()
    assert (await waiter).text == "42"


async def test_stampede_over_real_http_makes_one_upstream_call(fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.script(Fault(delay_s=0.05), route="embedding")
    async with ServiceManager(_settings(fake), host=builtin_only) as manager:
        results = await asyncio.gather(*(manager.embed("same text", tenant="acme") for _ in range(500)))
    assert fake.count(route="embedding") == 1
    assert len({r.vectors for r in results}) == 1 and sum(not r.cached for r in results) == 1


async def test_stampede_with_a_failing_leader_over_real_http(fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.script(Fault(status=500, delay_s=0.05), route="embedding")
    async with ServiceManager(_settings(fake), host=builtin_only) as manager:
        results = await asyncio.gather(*(manager.embed("same", tenant="acme") for _ in range(500)),
                                       return_exceptions=True)
        assert all(isinstance(r, ProviderUnavailableError) for r in results)
        assert not (await manager.embed("same", tenant="acme")).cached
    assert fake.count(route="embedding") == 2


async def test_two_tenants_over_real_http_never_see_each_others_entry(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(_settings(fake), host=builtin_only) as manager:
        first = await manager.embed("x", tenant="a")
        other = await manager.embed("x", tenant="b")
        again = await manager.embed("x", tenant="a")
    assert (first.cached, other.cached, again.cached) == (False, False, True)
    assert again.attempts == () and fake.count() == 2


async def test_deterministic_chat_is_cached_when_enabled(fake: FakeProvider, builtin_only: PluginHost,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    settings = _settings(fake, operations=["chat"])
    async with ServiceManager(settings, host=builtin_only) as manager:
        await manager.chat("2 + 2?", options={"temperature": 0})
        hit = await manager.chat("2 + 2?", options={"temperature": 0})
        miss = await manager.chat("2 + 2?", options={"temperature": 0.9})
    assert (hit.cached, miss.cached, fake.count()) == (True, False, 2)


PRICED = CompletionResponse(provider="openai", model="m", text="42", finish_reason="stop",
                            usage=Usage(input_tokens=10, output_tokens=5, cost_usd=0.25))


async def test_a_hit_costs_nothing_and_reports_what_it_saved() -> None:
    middleware = cache()
    await middleware.handle(ctx(), CONFIG, ScriptedNext(PRICED))
    hit = await middleware.handle(ctx(), CONFIG, ScriptedNext())
    assert (hit.usage.cost_usd, hit.usage.saved_cost_usd, hit.usage.input_tokens) == (0.0, 0.25, 10)


async def test_a_coalesced_waiter_costs_nothing_and_reports_what_it_saved() -> None:
    middleware, gate = cache(), asyncio.Event()

    async def slow(config: ProviderConfig) -> CompletionResponse:
        await gate.wait()
        return PRICED

    tasks = [asyncio.create_task(middleware.handle(ctx(), CONFIG, slow)) for _ in range(10)]
    await asyncio.sleep(0)
    gate.set()
    waiters = [r for r in await asyncio.gather(*tasks) if r.cached]
    assert len(waiters) == 9
    assert {(r.usage.cost_usd, r.usage.saved_cost_usd) for r in waiters} == {(0.0, 0.25)}


async def test_summed_response_costs_equal_the_ledger_over_real_http(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    price = {"input_usd_per_mtok": 1000.0, "output_usd_per_mtok": 2000.0}
    settings = Settings(configurations={"oa": openai_config(fake, price=price)},
                        middleware={**BUILTIN_MIDDLEWARE_OFF, "cache": {"operations": ["chat"]},
                                    "usage": {"store": "memory"}, "usage_hits": {}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        answers = [await manager.chat("2 + 2?", options={"temperature": 0}) for _ in range(5)]
        journal = manager.state.usage_journal()
        await journal.flush()
        billed = sum(r.cost_usd or 0.0 for r in await journal.store.records())
    assert fake.count() == 1 and billed > 0
    assert sum(a.usage.cost_usd or 0.0 for a in answers) == pytest.approx(billed)
    assert all(a.usage.saved_cost_usd == pytest.approx(billed) for a in answers[1:])


async def test_two_accounts_on_one_endpoint_never_share_an_entry(fake: FakeProvider, builtin_only: PluginHost) -> None:
    settings = Settings(configurations={"a": openai_config(fake, identifier="a", api_key="sk-account-a"),
                                        "b": openai_config(fake, identifier="b", api_key="sk-account-b")},
                        middleware={**BUILTIN_MIDDLEWARE_OFF, "cache": {}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        first = await manager.embed("x", configuration="a", tenant="acme")
        other = await manager.embed("x", configuration="b", tenant="acme")
        again = await manager.embed("x", configuration="a", tenant="acme")
    assert (first.cached, other.cached, again.cached, fake.count()) == (False, False, True, 2)


async def test_an_ad_hoc_call_with_another_key_or_none_misses(fake: FakeProvider, builtin_only: PluginHost) -> None:
    where: dict[str, Any] = {"provider": "openai", "model": "gpt-test", "base_url": fake.openai_base_url,
                             "tenant": "acme"}
    async with ServiceManager(_settings(fake), host=builtin_only) as manager:
        answers = [await manager.embed("x", api_key=key, **where) for key in ("sk-a", "sk-b", None, "sk-a")]
    assert [a.cached for a in answers] == [False, False, False, True] and fake.count() == 3


def _settings(fake: FakeProvider, **cache_options: Any) -> Settings:
    middleware: dict[str, Any] = {**BUILTIN_MIDDLEWARE_OFF, "cache": cache_options}
    return Settings(configurations={"oa": openai_config(fake)}, middleware=middleware, destinations=LOOPBACK_ALLOWED)


async def test_a_waiter_on_a_slow_leader_is_bound_by_its_own_deadline(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.script(Fault(delay_s=5), route="embedding")
    settings = Settings(configurations={"oa": openai_config(fake)}, middleware={"retry": {"enabled": False}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        leader = asyncio.create_task(manager.embed("slow"))
        await asyncio.sleep(0.01)
        with pytest.raises(TimeoutError, match="deadline of 0.05s"):
            await manager.embed("slow", controls={"deadline_s": 0.05})
        leader.cancel()


class SharedStore(MemoryCacheStore):
    """A memory store whose claim on every key is held by another process until ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.held = True
        self.unclaimed: list[str] = []
        self.refused = asyncio.Event()  # set once a claim was refused: the caller waits for the entry

    async def claim(self, key: str, ttl_s: float) -> str | None:
        if self.held:
            self.refused.set()
            return None
        return "token"

    async def unclaim(self, key: str, token: str) -> None:
        self.unclaimed.append(token)


async def test_a_miss_whose_claim_is_held_elsewhere_waits_for_that_entry() -> None:
    store = SharedStore()
    middleware, upstream = CacheMiddleware(CacheOptions(operations=("chat",)), store=store), ScriptedNext()
    waiting = asyncio.ensure_future(middleware.handle(ctx(), CONFIG, upstream))
    await asyncio.wait_for(store.refused.wait(), 5)
    await store.set(stored_key(), json.dumps(ANSWER.to_dict()), 60)  # the other process answers
    hit = await waiting
    assert hit.cached and hit.text == "42" and upstream.calls == []


async def test_a_miss_goes_upstream_once_the_other_claim_is_given_up() -> None:
    store = SharedStore()
    middleware, upstream = CacheMiddleware(CacheOptions(operations=("chat",)), store=store), ScriptedNext(ANSWER)
    waiting = asyncio.ensure_future(middleware.handle(ctx(), CONFIG, upstream))
    await asyncio.wait_for(store.refused.wait(), 5)
    store.held = False  # the other process failed, or its claim expired
    assert not (await waiting).cached
    assert len(upstream.calls) == 1 and store.unclaimed == ["token"]


async def test_a_failed_fill_gives_its_claim_back() -> None:
    store = SharedStore()
    store.held = False
    middleware = CacheMiddleware(CacheOptions(operations=("chat",)), store=store)
    with pytest.raises(ProviderUnavailableError):
        await middleware.handle(ctx(), CONFIG, ScriptedNext(ProviderUnavailableError("down", status=503)))
    assert store.unclaimed == ["token"]


async def test_a_store_that_grants_every_claim_is_never_asked_for_one() -> None:
    class Granting(SharedStore):
        grants_every_claim = True

    store = Granting()  # were it asked, its claim would be held elsewhere and the call would wait
    middleware = CacheMiddleware(CacheOptions(operations=("chat",)), store=GuardedCache(store))
    response = await asyncio.wait_for(middleware.handle(ctx(), CONFIG, ScriptedNext(ANSWER)), 5)
    assert not response.cached and store.unclaimed == []


async def test_the_memory_store_keeps_answers_without_json(monkeypatch: pytest.MonkeyPatch) -> None:
    middleware = cache()
    first = await middleware.handle(ctx(), CONFIG, ScriptedNext(ANSWER))
    monkeypatch.setattr("provmw.middleware.cache.any_response_from_dict", None)  # a decode would fail
    second = await middleware.handle(ctx(), CONFIG, ScriptedNext())
    assert not first.cached and second.cached and second.text == "42"
    assert await middleware.store.get(stored_key()) is None  # no text was written


async def test_a_store_that_keeps_answers_still_reads_text_another_writer_left() -> None:
    middleware = cache()
    await middleware.store.set(stored_key(), json.dumps(ANSWER.to_dict()), 60)
    hit = await middleware.handle(ctx(), CONFIG, ScriptedNext())
    assert hit.cached and hit.text == "42"


@pytest.mark.parametrize("text", ["a" * 3_000, "é" * 3_000], ids=["ascii", "wider"])
async def test_kept_answers_never_exceed_the_byte_bound(text: str) -> None:
    middleware = cache(max_bytes=100_000)
    store = middleware.store
    assert isinstance(store, MemoryCacheStore)
    for i in range(200):
        answer = CompletionResponse(provider="openai", model="m", text=text, finish_reason="stop")
        await middleware.handle(ctx(f"tenant-{i}{i % 10}"), CONFIG, ScriptedNext(answer))
        assert store.bytes <= 100_000
    assert 0 < store.entries < 200


@pytest.mark.parametrize("answer", [
    CompletionResponse(provider="openai", model="m", text="é" * 500 + "a", finish_reason="stop"),
    CompletionResponse(provider="openai", model="m", text="{}", finish_reason="tool_calls",
                       tool_calls=(ToolCall("c1", "weather", '{"city": "Zürich"}'),) * 20),
    CompletionResponse(provider="openai", model="m", text='{"a": [1, 2, 3]}', finish_reason="stop",
                       parsed={"a": [1, 2, 3]}),
    EmbeddingResponse(provider="openai", model="m", vectors=[[0.1] * 1536] * 4),
], ids=["wide-text", "tool-calls", "parsed", "vectors"])
def test_an_answer_is_counted_at_no_less_than_it_holds(answer: CompletionResponse | EmbeddingResponse) -> None:
    assert _answer_bytes(answer) >= _deep_size(answer)


def _deep_size(value: object) -> int:
    # Every object the answer holds, each counted once per place it occupies (so shared ones more than once).
    if attrs.has(type(value)):
        names = [f.name for f in attrs.fields(type(value))]  # type: ignore[arg-type]
        return sys.getsizeof(value) + sum(_deep_size(getattr(value, name)) for name in names)
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(_deep_size(k) + _deep_size(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return sys.getsizeof(value) + sum(_deep_size(v) for v in value)
    return sys.getsizeof(value)


async def test_only_the_leader_of_a_stampede_reports_an_attempt(fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.script(Fault(delay_s=0.05), route="embedding")
    async with ServiceManager(_settings(fake), host=builtin_only) as manager:
        results = await asyncio.gather(*(manager.embed("same text", tenant="acme") for _ in range(5)))
    assert sorted(len(r.attempts) for r in results) == [0, 0, 0, 0, 1]
    assert [r.attempts for r in results if not r.cached] == [(Attempt(config_id="oa"),)]
