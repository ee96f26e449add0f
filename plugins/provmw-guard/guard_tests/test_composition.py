"""The guard composed with everything around it (ADR 0048): in front of the third-party example adapter
and of every first-party provider (openai, anthropic, provmw-azure, provmw-bedrock, provmw-gemini),
over a generated corpus (``corpus.py``) of every kind of personal data in prose, JSON and tool-call
arguments, no raw value reaches what lies below or beside it:

- the fake provider's recorded requests (bodies, headers, routes), every attempt of a fallback chain;
- the shared state in the real Redis (provmw-redis): the cache and the idempotency store, every key
  under the test's prefix, every value of every type;
- the ledger: a real SQLite file (every column of every row of every table, and the bytes of the
  file and its companions), or provmw-postgres's table in the real PostgreSQL (every column of
  every row of every table of the test's schema);
- the log (every record at DEBUG: its message, its arguments, its formatted text);
- the spans of provmw-otel through an in-memory SDK (every attribute and every event of every span),
  and its metrics' attributes;

the caller gets every value back exactly: from the provider, from the idempotency store, from the
cache (one entry answering each caller with its own values), in a stream, in tool calls (streamed
too) and in a JSON answer; and a call holding a secret is refused before anything is sent.

Redis and PostgreSQL are those of provmw-redis's and provmw-postgres's tests, reached through
their own fixtures: under CI a missing server fails these tests instead of skipping them.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import provmw_otel
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from provmw_azure.fake import AzureWire
from provmw_bedrock.fake import BedrockWire
from provmw_gemini.fake import GeminiWire

from provmw.config import ProviderConfig
from provmw.errors import GuardRefusedError
from provmw.manager import ServiceManager
from provmw.messages import ImagePart, Message, ToolCall, ToolSpec
from provmw.plugins import PluginHost, PluginPolicy, hookimpl
from provmw.providers import ProviderAdapter
from provmw.settings import Settings
from provmw.stores.shared import StateSettings
from provmw.testing import FakeProvider, Fault
from tests.providers.thirdparty_adapter import AcmeAdapter

from .corpus import (
    Case,
    Value,
    as_text,
    case_of,
    cases,
    file_texts,
    found_raw,
    log_texts,
    metric_texts,
    redis_texts,
    requests_sent,
    secrets,
    span_texts,
    sqlite_rows_texts,
    twins,
)

PLUGINS = Path(__file__).parents[2]


def _tests_module(path: str, name: str) -> ModuleType:
    """Another plugin's test module, by its path: those folders are not packages on ``sys.path``."""
    spec = importlib.util.spec_from_file_location(name, PLUGINS / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# provmw-redis's fixtures: its server's URL (a missing Redis fails under CI), a key prefix of the test's
# own (deleted after it), a client, and the signing key its shared cache needs.
_redis = _tests_module("provmw-redis/tests/conftest.py", "provmw_redis_tests_conftest")
redis_url, redis_sync, prefix, _signing_key = _redis.redis_url, _redis.redis_sync, _redis.prefix, _redis._signing_key
# provmw-postgres's: its server's URL (the same CI rule) and a schema of the test's own (dropped after it).
_postgres = _tests_module("provmw-postgres/postgres_tests/conftest.py", "provmw_postgres_tests_conftest")
postgres_url, schema, postgres_rows = _postgres.postgres_url, _postgres.schema, _postgres.rows

pytestmark = pytest.mark.redis

# The plugins the stack is made of, as installed; provmw-otel's layers are handed in with an in-memory SDK.
FIRST_PARTY = ("guard", "azure", "bedrock", "gemini", "calllog", "redis", "postgres")
TOOL = ToolSpec("lookup", "finds a customer", {"type": "object", "properties": {"to": {"type": "string"}},
                                               "required": ["to"]})
PNG = b"\x89PNG\r\n\x1a\n"  # the signature is all the fake wires read of an image
SCHEMA = {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}
EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@attrs.frozen
class Provider:
    """A provider the guard stands in front of, and where the fake serves its wire."""

    name: str
    model: str
    base_url: Callable[[FakeProvider], str]

    def config(self, fake: FakeProvider, identifier: str = "main", fallbacks: tuple[str, ...] = ()) -> ProviderConfig:
        # temperature 0: a deterministic call, so that the cache keeps its answer
        return ProviderConfig(identifier=identifier, provider=self.name, model=self.model, base_url=self.base_url(fake),
                              api_key="provider-test-key", options={"temperature": 0}, fallbacks=fallbacks)


PROVIDERS = (
    Provider("openai", "gpt-test", lambda fake: fake.openai_base_url),
    Provider("anthropic", "claude-test", lambda fake: fake.anthropic_base_url),
    Provider("azure", "gpt-4o-prod", lambda fake: fake.url),
    Provider("bedrock", "anthropic.claude-3-haiku-20240307-v1:0", lambda fake: fake.url),
    Provider("gemini", "gemini-2.5-flash", lambda fake: f"{fake.url}/v1beta"),
    Provider("acme", "acme-large", lambda fake: fake.openai_base_url),  # the third-party example adapter
)


# The third-party example adapter streams text only (its conformance run says so).
STREAMS_TOOL_CALLS = {p.name: p.name != "acme" for p in PROVIDERS}


class Acme:
    """The third-party example adapter's plugin."""

    @hookimpl
    def provmw_providers(self) -> Iterable[ProviderAdapter]:
        return [AcmeAdapter()]


def host() -> PluginHost:
    built = PluginHost(PluginPolicy(allow=FIRST_PARTY), environ={})
    built.register(Acme(), "acme")
    return built


@attrs.frozen
class Ledger:
    """The ledger under the stack: its ``[middleware.usage]`` section, and readers of what it holds."""

    section: Mapping[str, Any]
    rows: Callable[[], list[str]]  # every column of every row, as text
    files: Callable[[], list[str]]  # the bytes of its files, where it has any


@attrs.frozen
class Composed:
    """A manager on the fake with the guard loaded, and every sink it must keep raw values from."""

    manager: ServiceManager
    fake: FakeProvider
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    log: pytest.LogCaptureFixture
    redis: redis.Redis
    prefix: str
    ledger: Ledger

    async def drain(self) -> dict[str, list[str]]:
        """Every text each sink holds: the stores whole, and what was sent, logged or traced since the
        last look (each example's records are read with that example's values)."""
        sinks = {"ledger": await self.ledger_rows(), "ledger files": self.ledger.files(),
                 "provider": requests_sent(self.fake), "redis": redis_texts(self.redis, self.prefix),
                 "log": log_texts(self.log), "spans": span_texts(self.spans), "metrics": metric_texts(self.metrics)}
        self.fake.received.clear()
        self.log.clear()
        self.spans.clear()
        return sinks

    async def ledger_rows(self) -> list[str]:
        """The ledger's rows once every record so far is written: a call returns when its record is
        durable (in the write-ahead file), and the store takes it a moment later."""
        await self.manager.state.usage_journal().flush()
        return self.ledger.rows()


def postgres_rows_texts(url: str, name: str) -> list[str]:
    """Every column of every row of every table in schema ``name``."""
    tables = postgres_rows(url, name, f"SELECT table_name FROM information_schema.tables WHERE table_schema = '{name}'")
    return [as_text(row) for (table,) in tables for row in postgres_rows(url, name, "SELECT * FROM {table}", table)]


@pytest.fixture
async def wires() -> AsyncIterator[FakeProvider]:
    """The fake provider serving the built-in wires and those of provmw-azure, -bedrock and -gemini."""
    async with FakeProvider(wires=[AzureWire(), BedrockWire(), GeminiWire()]) as server:
        yield server


@pytest.fixture
def ledger_kind() -> str:
    """The ledger under the stack: SQLite, unless a test parametrizes ``ledger_kind`` ("postgresql")."""
    return "sqlite"


@pytest.fixture
def ledger(request: pytest.FixtureRequest, ledger_kind: str, tmp_path: Path) -> Ledger:
    """A SQLite file of the test's own, or a schema of its own in provmw-postgres's PostgreSQL."""
    if ledger_kind == "postgresql":
        url, name = request.getfixturevalue("postgres_url"), request.getfixturevalue("schema")
        return Ledger({"store": url, "schema": name}, lambda: postgres_rows_texts(url, name), list)
    path = tmp_path / "ledger" / "usage.sqlite3"
    path.parent.mkdir()
    return Ledger({"store": "sqlite", "path": str(path)}, lambda: sqlite_rows_texts(path), lambda: file_texts(path))


Built = tuple[ServiceManager, InMemorySpanExporter, InMemoryMetricReader]


def compose(configurations: Mapping[str, ProviderConfig], redis_url: str, prefix: str, usage: Mapping[str, Any],
            guard: Mapping[str, Any] | None = None) -> Built:
    """The stack: the guard and every built-in layer, provmw-otel's two layers on an in-memory SDK, the
    call log, the shared state in Redis (cache and idempotency store among it), and ``usage``'s ledger;
    ``guard`` is the guard's section (its defaults when not given)."""
    spans, metrics = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = provmw_otel.Telemetry(tracer_provider, MeterProvider(metric_readers=[metrics]))
    settings = Settings(configurations=configurations, default=next(iter(configurations)),
                        middleware={"cache": {"operations": ["chat", "tools", "completion", "embedding", "vision"]},
                                    "usage": dict(usage), "guard": dict(guard or {})},
                        state=StateSettings(redis_url, options={"key_prefix": prefix}))
    layers = provmw_otel.middleware(provmw_otel.OtelOptions(), telemetry)
    return ServiceManager(settings, host=host(), middleware=layers), spans, metrics


@pytest.fixture
def guard_section() -> dict[str, Any]:
    """``[middleware.guard]``: the defaults, unless a test parametrizes ``guard_section``."""
    return {}


@pytest.fixture
async def composed(provider: Provider, wires: FakeProvider, redis_url: str, prefix: str, redis_sync: redis.Redis,
                   ledger: Ledger, guard_section: dict[str, Any],
                   caplog: pytest.LogCaptureFixture) -> AsyncIterator[Composed]:
    manager, spans, metrics = compose({"main": provider.config(wires)}, redis_url, prefix, ledger.section,
                                      guard_section)
    async with manager:
        yield Composed(manager, wires, spans, metrics, caplog, redis_sync, prefix, ledger)


@pytest.fixture
def debug_log(caplog: pytest.LogCaptureFixture) -> None:
    """Every record from DEBUG up kept, for the tests that read the log (the others skip the cost)."""
    caplog.set_level(logging.DEBUG)


@pytest.fixture
def tally(request: pytest.FixtureRequest) -> Iterator[collections.Counter[str]]:
    """What the corpus held and what was found raw, kept as the test's properties (``--junitxml`` writes
    them with ``-o junit_family=xunit1``)."""
    counts: collections.Counter[str] = collections.Counter()
    yield counts
    request.node.user_properties += sorted(counts.items())


def _count(tally: collections.Counter[str], case: Case, found: Mapping[str, list[str]]) -> None:
    tally["examples"] += 1
    tally["values"] += len(case.values)
    tally.update(f"values.{value.kind}" for value in case.values)
    tally["found raw"] += sum(len(leaked) for leaked in found.values())


def history(case: Case) -> list[Message]:
    """A conversation whose history holds a tool call and its result, ending in one line a value."""
    call = ToolCall("call-1", TOOL.name, case.arguments)
    return [Message.user(case.prose), Message.assistant(tool_calls=[call]), Message.tool("call-1", case.document),
            Message.assistant("noted"), Message.user("\n".join(case.lines))]


Answer = tuple[str, object, object]  # what was asked, what the caller got, what it should have got


async def exchange(manager: ServiceManager, case: Case) -> list[Answer]:
    """Every kind of call the provider serves, with ``case``'s values in it: what came back and what should have."""
    return [*await calls_every_provider_serves(manager, case), *await _optional(manager, case)]


async def calls_every_provider_serves(manager: ServiceManager, case: Case) -> list[Answer]:
    """A chat answered by the provider, then by the idempotency store, then by the cache; a stream; tool calls."""
    turns, key = [Message.system(case.prose), Message.user(case.document)], uuid.uuid4().hex
    echo = f"echo: {case.document}"
    first = await manager.chat(turns, idempotency_key=key)
    repeat = await manager.chat(turns, idempotency_key=key)  # from the idempotency store
    cached = await manager.chat(turns)  # from the cache
    streamed = "".join([chunk.text async for chunk in manager.stream_chat(case.prose)])
    tools = await manager.chat_with_tools(history(case), tools=[TOOL])
    return [("chat", first.text, echo), ("idempotent repeat", (repeat.text, repeat.cached), (echo, True)),
            ("cache hit", (cached.text, cached.cached), (echo, True)),
            # the fake's wires stream a word at a time, each followed by a space (Gemini's but the last)
            ("stream", streamed.removesuffix(" "), f"echo: {case.prose}"),
            ("tool calls", [list(c.args.values()) for c in tools.tool_calls], [[line] for line in case.lines])]


async def _optional(manager: ServiceManager, case: Case) -> list[Answer]:
    """The calls only some providers serve: a JSON answer to a schema, a completion, embeddings, an
    image's question, tool calls in a stream."""
    offers = manager.capabilities[manager.resolve().provider]
    echo = f"echo: {case.prose}"
    answers: list[Answer] = []
    if offers.schema:
        structured = await manager.chat(case.prose, response_schema=SCHEMA)
        answers.append(("schema", (structured.parsed, json.loads(structured.text)), ({"note": echo},) * 2))
    if offers.completion:
        answers.append(("completion", (await manager.complete(case.prose)).text, echo))
    if offers.embeddings:
        await manager.embed([case.prose, case.document])
    if offers.vision:
        seen = await manager.vision(case.prose, [ImagePart(data=PNG)])
        answers.append(("vision", seen.text, f"I see 1 image. {echo}"))
    if STREAMS_TOOL_CALLS[manager.resolve().provider]:
        chunks = [chunk async for chunk in manager.stream_chat_with_tools(history(case), tools=[TOOL])]
        answers.append(("streamed tool calls", [list(c.args.values()) for chunk in chunks for c in chunk.tool_calls],
                        [[line] for line in case.lines]))
    return answers


async def refusals(manager: ServiceManager, case: Case) -> list[str]:
    """The rule that refused each call holding ``case``'s values, in prose, JSON, tool-call arguments, a stream."""
    call = ToolCall("call-1", TOOL.name, case.arguments)
    with_arguments = [Message.user("find her"), Message.assistant(tool_calls=[call]), Message.tool("call-1", "found"),
                      Message.assistant("noted"), Message.user("thanks")]
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: manager.chat(case.prose), lambda: manager.chat(case.document),
        lambda: manager.chat_with_tools(with_arguments, tools=[TOOL]),
        lambda: anext(aiter(manager.stream_chat(case.prose)))]
    rules = []
    for made in calls:
        with pytest.raises(GuardRefusedError) as refused:
            await made()
        rules.append(refused.value.rule)
    return rules


by_name = pytest.mark.parametrize("provider", PROVIDERS, ids=[p.name for p in PROVIDERS])
on_postgres = pytest.mark.parametrize("ledger_kind", ["postgresql"])
# One of each kind, in each form: what the tests of the sinks themselves send.
EVERY_KIND = case_of([Value("email", "ada.lovelace@example.com"), Value("phone", "+44 20 7946 0958"),
                      Value("card", "4111 1111 1111 1111"), Value("iban", "GB82 WEST 1234 5698 7654 32"),
                      Value("ip4", "203.0.113.77"), Value("ip6", "2001:db8:85a3::8a2e:370:7334")])


@pytest.mark.usefixtures("debug_log")
@by_name
@EXAMPLES
@given(case=cases())
async def test_no_raw_value_reaches_the_provider_redis_the_sqlite_ledger_the_log_or_spans(
        composed: Composed, tally: collections.Counter[str], case: Case) -> None:
    await exchange(composed.manager, case)
    found = found_raw(case.raw, await composed.drain())
    _count(tally, case, found)
    assert found == {}


@pytest.mark.postgres
@on_postgres
@by_name
@EXAMPLES
@given(case=cases())
async def test_no_raw_value_reaches_the_postgres_ledger(composed: Composed, tally: collections.Counter[str],
                                                        case: Case) -> None:
    await calls_every_provider_serves(composed.manager, case)  # records of attempts and of both kinds of hit
    found = found_raw(case.raw, {"ledger": await composed.ledger_rows()})
    _count(tally, case, found)
    assert found == {}


@pytest.mark.usefixtures("debug_log")
@by_name
@EXAMPLES
@given(case=cases(secrets()))
async def test_a_secret_anywhere_is_refused_before_anything_is_sent_and_reaches_no_sink(
        composed: Composed, tally: collections.Counter[str], case: Case) -> None:
    rules = await refusals(composed.manager, case)
    sinks = await composed.drain()
    found = found_raw(case.raw, sinks)
    _count(tally, case, found)
    assert (rules, sinks["provider"], found) == ([case.values[0].kind] * 4, [], {})


@pytest.mark.usefixtures("debug_log")
@pytest.mark.parametrize("guard_section", [{"secrets": "redact"}])
@by_name
@EXAMPLES
@given(case=cases(secrets()))
async def test_a_secret_redacted_reaches_no_sink_and_comes_back_to_the_caller(
        composed: Composed, tally: collections.Counter[str], case: Case) -> None:
    answers = await calls_every_provider_serves(composed.manager, case)
    found = found_raw(case.raw, await composed.drain())
    _count(tally, case, found)
    assert (found, [got for _, got, _ in answers]) == ({}, [expected for _, _, expected in answers])


@by_name
@EXAMPLES
@given(case=cases())
async def test_the_caller_gets_every_value_back_exactly(composed: Composed, tally: collections.Counter[str],
                                                        case: Case) -> None:
    answers = await exchange(composed.manager, case)
    _count(tally, case, {})
    tally["answers"] += len(answers)
    assert [(what, got) for what, got, _ in answers] == [(what, expected) for what, _, expected in answers]


@by_name
@EXAMPLES
@given(pair=twins())
async def test_one_cache_entry_answers_each_caller_with_its_own_values(composed: Composed,
                                                                      pair: tuple[Case, Case]) -> None:
    first, second = [await composed.manager.chat(case.prose) for case in pair]
    assert [(first.text, second.text), second.cached] == [tuple(f"echo: {case.prose}" for case in pair), True]


@pytest.mark.usefixtures("debug_log")
@by_name
async def test_every_sink_the_properties_read_is_written(composed: Composed) -> None:
    await exchange(composed.manager, EVERY_KIND)
    sinks = await composed.drain()
    assert [sink for sink, texts in sinks.items() if not texts] == []
    assert "<EMAIL_1>" in "".join(sinks["provider"]) and "<CARD_1>" in "".join(sinks["provider"])


@by_name
async def test_the_cache_and_the_idempotency_store_are_in_redis(composed: Composed) -> None:
    await exchange(composed.manager, EVERY_KIND)
    keys = [key.decode() for key in composed.redis.scan_iter(match=f"{composed.prefix}*")]
    assert any(":cache:default:" in key for key in keys) and any(":cache:idempotency:" in key for key in keys)


@pytest.mark.postgres
@on_postgres
@by_name
async def test_the_postgres_ledger_is_written(composed: Composed) -> None:
    await exchange(composed.manager, EVERY_KIND)
    assert await composed.ledger_rows() != []


async def test_a_fallback_chain_through_every_provider_sends_each_attempt_redacted(
        wires: FakeProvider, redis_url: str, prefix: str, ledger: Ledger) -> None:
    first, *rest = PROVIDERS
    chain = {first.name: first.config(wires, first.name, tuple(p.name for p in rest)),
             **{p.name: p.config(wires, p.name) for p in rest}}
    for provider in PROVIDERS[:-1]:
        wires.script(Fault(status=503), model=provider.model)
    manager, _, _ = compose(chain, redis_url, prefix, ledger.section)
    async with manager:
        answer = await manager.chat(EVERY_KIND.document, controls={"max_attempts": 1})
    sent = found_raw(EVERY_KIND.raw, {"provider": requests_sent(wires)})
    assert (answer.served_by, wires.count(), answer.text, sent) == ("acme", 6, f"echo: {EVERY_KIND.document}", {})
