"""A provider that echoes the request's key in a 200 answer's model, id or finish reason gets it
onto no span or metric, with ``capture_content`` off (issue 33 item 4)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from otel_harness import KEY, Recorded, points, recording
from provmw_otel import middleware
from provmw_otel.options import OtelOptions

from provmw import ServiceManager
from provmw.config import ProviderConfig
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import Settings
from tests.hostile import HostileProvider


@pytest.fixture
async def hostile() -> AsyncIterator[HostileProvider]:
    async with HostileProvider() as server:
        yield server


def manager(hostile: HostileProvider, rec: Recorded) -> ServiceManager:
    config = ProviderConfig(identifier="h", provider="openai", model="m", base_url=hostile.openai_base_url,
                            api_key=KEY)
    settings = Settings(configurations={"h": config}, middleware={"usage": {"store": "memory"}})
    return ServiceManager(settings, host=PluginHost(PluginPolicy(autoload=False), environ={}),
                          middleware=middleware(OtelOptions(), rec.telemetry))


def exported(rec: Recorded) -> str:
    return repr([dict(s.attributes or {}) for s in rec.finished()]) + repr(points(rec))


async def test_a_key_echoed_in_an_answer_reaches_no_span_or_metric(hostile: HostileProvider) -> None:
    choice = {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": KEY}
    hostile.answer(json.dumps({"id": KEY, "model": KEY, "choices": [choice]}))
    with recording() as rec:
        async with manager(hostile, rec) as m:
            await m.chat("hi")
        assert "'gen_ai.response.model': '***'" in exported(rec)
        assert KEY not in exported(rec)


async def test_a_key_echoed_in_a_streamed_finish_reason_reaches_no_span(hostile: HostileProvider) -> None:
    delta = {"id": KEY, "model": KEY, "choices": [{"index": 0, "delta": {"content": "hel"}, "finish_reason": None}]}
    end = {"id": KEY, "model": KEY, "choices": [{"index": 0, "delta": {}, "finish_reason": KEY}]}
    hostile.sse(json.dumps(delta), json.dumps(end), "[DONE]")
    with recording() as rec:
        async with manager(hostile, rec) as m:
            [_ async for _ in m.stream_chat("hi")]
        assert "'gen_ai.response.finish_reasons': ('***',)" in exported(rec)
        assert KEY not in exported(rec)
