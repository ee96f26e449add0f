"""A key's secret never reaches the shared state: after gateway calls with every concern in Redis (a
server of the test's own, so every key in it is the gateway's), no Redis key or value holds it."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import redis

from provmw.testing import FakeProvider
from tests.gateway.test_health import CHAT, chat, document, served
from tests.gateway.test_outage import OwnRedis, own_redis  # noqa: F401 - the fixture, used by name


async def test_no_redis_key_or_value_holds_the_secret(fake: FakeProvider, tmp_path: Path,
                                                       own_redis: OwnRedis) -> None:  # noqa: F811
    rate_limit = {"limits": {"chat": {"requests_per_minute": 1000}}}
    settings = {**document(fake, tmp_path, cache={"enabled": True}, rate_limit=rate_limit),
                "state": {"url": own_redis.url}}
    async with served(settings, tmp_path) as gw, aiohttp.ClientSession() as client:
        await gw.keys.set_budget("key", gw.key_id, "day", max_requests=100)
        statuses = [await chat(client, gw), await chat(client, gw),  # the second, a cache hit
                    await chat(client, gw, {**CHAT, "stream": True, "stream_options": {"include_usage": True}})]
    secret = gw.key[len("pmk_0123456789ab_"):].encode()
    with redis.Redis.from_url(own_redis.url) as server:
        stored = [(name, server.dump(name) or b"") for name in server.scan_iter()]
    assert statuses == [200, 200, 200] and len(stored) >= 3  # the budget's, the cache's, the rate limit's at least
    assert not [name for name, value in stored if secret in name or secret in value]
    assert [name for name, value in stored if gw.key_id.encode() in name + value]  # the search finds what is there
