from __future__ import annotations

import os
import pickle
import time
import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from provmw.context import CallFacts, FrozenMap, ProviderCallContext, ProviderOperation, scoped_key
from provmw.testing import call_context


def test_correlation_id_is_uuid4_hex_unless_given() -> None:
    ctx = ProviderCallContext(ProviderOperation.CHAT)
    assert len(ctx.correlation_id) == 32
    assert int(ctx.correlation_id, 16) >= 0
    assert ProviderCallContext(ProviderOperation.CHAT, "given").correlation_id == "given"


def test_a_correlation_id_is_a_version_4_uuid() -> None:
    ctx = ProviderCallContext(ProviderOperation.CHAT)
    made = uuid.UUID(hex=ctx.correlation_id)
    assert (made.version, made.variant, made.hex) == (4, uuid.RFC_4122, ctx.correlation_id)


def test_a_call_id_is_a_version_7_uuid_of_the_millisecond_it_was_made() -> None:
    before = time.time_ns() // 1_000_000
    ctx = ProviderCallContext(ProviderOperation.CHAT)
    made = uuid.UUID(hex=ctx.call_id)
    assert (made.version, made.variant, made.hex) == (7, uuid.RFC_4122, ctx.call_id)
    assert before <= int(ctx.call_id[:12], 16) <= time.time_ns() // 1_000_000


def test_call_ids_made_in_later_milliseconds_sort_later_and_never_repeat() -> None:
    ids = []
    for _ in range(5):
        ids += [ProviderCallContext(ProviderOperation.CHAT).call_id for _ in range(200)]
        time.sleep(0.002)
    assert len(set(ids)) == len(ids)
    firsts = [ids[i * 200] for i in range(5)]
    assert firsts == sorted(firsts)  # the ledger's index on them grows at its end (ADR 0033)


def test_each_context_gets_its_own_correlation_id() -> None:
    ids = {ProviderCallContext(ProviderOperation.CHAT).correlation_id for _ in range(100)}
    assert len(ids) == 100


def test_context_is_frozen() -> None:
    ctx = ProviderCallContext(ProviderOperation.CHAT)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        ctx.correlation_id = "x"  # type: ignore[misc]


def test_metadata_is_immutable() -> None:
    ctx = ProviderCallContext(ProviderOperation.CHAT, metadata={"user": "ada"})
    with pytest.raises(TypeError):
        ctx.metadata["user"] = "eve"  # type: ignore[index]


def test_with_metadata_merges_into_a_copy() -> None:
    ctx = ProviderCallContext(ProviderOperation.EMBEDDING, metadata={"user": "ada"})
    merged = ctx.with_metadata(tenant="acme", user="bob")
    assert dict(merged.metadata) == {"user": "bob", "tenant": "acme"}
    assert dict(ctx.metadata) == {"user": "ada"}
    assert merged.correlation_id == ctx.correlation_id


def test_context_pickles_with_its_metadata() -> None:
    ctx = ProviderCallContext(ProviderOperation.TOOLS, metadata={"user": "ada", "n": 3})
    assert pickle.loads(pickle.dumps(ctx)) == ctx


def test_metadata_given_as_dict_is_copied() -> None:
    source = {"user": "ada"}
    ctx = ProviderCallContext(ProviderOperation.CHAT, metadata=source)
    source["user"] = "eve"
    assert ctx.metadata["user"] == "ada"
    assert isinstance(ctx.metadata, FrozenMap)


def test_operation_values_are_the_documented_strings() -> None:
    assert [op.value for op in ProviderOperation] == ["chat", "completion", "embedding", "vision", "tools", "responses",
                                                      "image", "image_edit", "transcription", "speech", "rerank",
                                                      "moderation"]


def test_a_built_in_fact_read_as_metadata_still_answers_with_a_deprecation_warning() -> None:
    ctx = call_context(tenant="acme", metadata={"mine": 1})
    with pytest.warns(DeprecationWarning, match=r"read ctx.facts.tenant"):
        assert ctx.metadata.get("tenant") == "acme"
    assert dict(ctx.metadata) == {"mine": 1}


def test_plugin_metadata_survives_with_metadata_and_keeps_the_facts() -> None:
    ctx = call_context(user="ada").with_metadata(mine=2)
    assert ctx.metadata["mine"] == 2 and ctx.facts.user == "ada"


def test_correlation_ids_are_uuid4_and_never_repeat_across_pool_refills() -> None:
    ids = [ProviderCallContext(ProviderOperation.CHAT).correlation_id for _ in range(1_000)]
    assert len(set(ids)) == 1_000
    assert all(uuid.UUID(i).version == 4 and uuid.UUID(i).hex == i for i in ids)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_hand_out_its_parents_next_ids() -> None:
    ProviderCallContext(ProviderOperation.CHAT)  # the parent's pool holds ids not yet handed out
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(writer, ProviderCallContext(ProviderOperation.CHAT).correlation_id.encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(reader, 64).decode()
    os.close(reader)
    os.close(writer)
    assert child != ProviderCallContext(ProviderOperation.CHAT).correlation_id


def test_each_lazy_fact_is_computed_once_however_often_it_is_read() -> None:
    made: list[str] = []

    def computing(name: str, value: Any) -> Callable[[], Any]:
        def compute() -> Any:
            made.append(name)
            return value
        return compute

    facts = CallFacts(digest=computing("digest", "d" * 64), sizes=computing("sizes", (3, 5, {})),
                      bounds=computing("bounds", (7, 0.5, 0.25)), tenant="acme")
    for _ in range(3):
        seen = (facts.cache_key, facts.shared_cache_key, facts.estimated_input_tokens, facts.max_output_tokens,
                facts.unmet, facts.max_input_tokens, facts.planned_cost_usd, facts.estimated_cost_usd)
    assert sorted(made) == ["bounds", "digest", "sizes"]
    assert seen[1:] == ("d" * 64, 3, 5, FrozenMap(), 7, 0.5, 0.25)
    assert seen[0] == scoped_key("d" * 64, "acme", None)


def test_facts_compare_equal_whether_or_not_their_lazy_facts_were_read() -> None:
    read, unread = CallFacts(user="ada", deterministic=True), CallFacts(user="ada", deterministic=True)
    assert (read.cache_key, read.estimated_input_tokens, read.max_input_tokens) == (None, 0, 0)
    assert read == unread
    assert pickle.loads(pickle.dumps(read)) == unread


READS = [lambda m: m["tenant"], lambda m: m.get("tenant")]  # the line a warning must point at


@pytest.mark.parametrize("read", READS)
def test_a_deprecated_key_is_blamed_on_the_line_that_reads_it(read: Any) -> None:
    ctx = call_context(tenant="acme")
    with pytest.warns(DeprecationWarning, match="read ctx.facts.tenant") as caught:
        assert read(ctx.metadata) == "acme"
    assert (caught[0].filename, caught[0].lineno) == (__file__, read.__code__.co_firstlineno)
