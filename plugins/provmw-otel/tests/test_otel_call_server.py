"""The call span names the server of the attempt that served the answer (a failed call: of its
last attempt; a cache hit: none, no server was reached), host and port only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import attrs
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from otel_harness import configurations, fake_provider, manager, recording, run, tree  # noqa: F401  (a fixture)

from provmw.errors import FallbackExhaustedError
from provmw.testing import FakeProvider, Fault


@pytest.fixture(name="backup")
async def backup_provider() -> AsyncIterator[FakeProvider]:
    """A second fake on its own port, serving the fallback "an"."""
    async with FakeProvider() as server:
        yield server


def server(span: ReadableSpan) -> tuple[Any, Any]:
    found = span.attributes or {}
    return found.get("server.address"), found.get("server.port")


def where(fake: FakeProvider) -> tuple[str, int | None]:
    return "127.0.0.1", urlsplit(fake.url).port


async def test_the_call_span_names_the_server_that_answered(fake: FakeProvider) -> None:
    with recording() as rec:
        await run("plain", fake, rec.telemetry)
        root, [attempt] = tree(rec.finished())
    assert server(root) == server(attempt) == where(fake)


async def test_a_failed_over_call_names_the_fallbacks_server(fake: FakeProvider, backup: FakeProvider) -> None:
    fake.script(Fault(status=503), model="gpt-test")
    with recording() as rec:
        async with manager(fake, rec.telemetry, configs=configurations(fake, backup)) as m:
            response = await m.chat("hi there", controls={"max_attempts": 1})
        root, _ = tree(rec.finished())
    assert response.served_by == "an" and server(root) == where(backup) != where(fake)


async def test_a_failed_call_names_its_last_attempts_server(fake: FakeProvider, backup: FakeProvider) -> None:
    fake.script(Fault(status=503), model="gpt-test")
    backup.script(Fault(status=503), model="claude-test")
    with recording() as rec:
        async with manager(fake, rec.telemetry, configs=configurations(fake, backup)) as m:
            with pytest.raises(FallbackExhaustedError):
                await m.chat("hi there", controls={"max_attempts": 1})
        root, children = tree(rec.finished())
    assert len(children) == 2 and server(root) == server(children[-1]) == where(backup)


async def test_a_cache_hit_names_no_server_where_its_miss_named_one(fake: FakeProvider) -> None:
    with recording() as rec:
        await run("cache_hit", fake, rec.telemetry)
        miss, hit = [s for s in rec.finished() if s.parent is None]
    assert server(miss) == where(fake) and server(hit) == (None, None) and fake.count() == 1


async def test_a_streams_call_span_names_the_server_that_opened_it(fake: FakeProvider, backup: FakeProvider) -> None:
    fake.script(Fault(status=503), model="gpt-test")
    with recording() as rec:
        async with manager(fake, rec.telemetry, configs=configurations(fake, backup)) as m:
            _ = [c async for c in m.stream_chat("stream me", controls={"max_attempts": 1})]
        root, _ = tree(rec.finished())
    assert server(root) == where(backup)


async def test_credentials_in_a_base_url_never_reach_the_call_span(fake: FakeProvider) -> None:
    secret = "s3cret-in-url"
    configs = configurations(fake)
    url = fake.openai_base_url.replace("//", f"//ada:{secret}@")
    configs["oa"] = attrs.evolve(configs["oa"], base_url=url, api_key=None)
    with recording() as rec:
        async with manager(fake, rec.telemetry, configs=configs) as m:
            await m.chat("hi there")
        root, _ = tree(rec.finished())
        dumped = " ".join(s.to_json() for s in rec.finished())
    assert server(root) == where(fake) and secret not in dumped
