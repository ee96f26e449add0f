from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from provmw.config import ProviderConfig
from provmw.destinations import DestinationPolicy
from provmw.http import HttpClient
from provmw.plugins import PluginHost, PluginPolicy
from provmw.testing import FakeProvider
from tests.hostile import HostileProvider

SENTINEL_KEY = "sk-SENTINEL-7f3a9c-do-not-print"

BUILTIN_MIDDLEWARE = ("deadline", "usage_hits", "idempotency", "cache", "budget", "fallback", "rate_limit",
                      "structured_output", "retry", "circuit_breaker", "usage", "timeout")
# Ad-hoc calls to the loopback fake provider must be allowed, like any loopback destination.
LOOPBACK_ALLOWED = DestinationPolicy(ad_hoc_destinations=("public", "loopback"))
# Settings sections that switch every built-in middleware off: for tests of the bare wiring.
BUILTIN_MIDDLEWARE_OFF = {name: {"enabled": False} for name in BUILTIN_MIDDLEWARE}


@pytest.fixture
async def fake() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as server:
        yield server


@pytest.fixture
async def hostile() -> AsyncIterator[HostileProvider]:
    """A loopback provider that answers whatever the test scripts (see ``tests/hostile.py``)."""
    async with HostileProvider() as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    client = HttpClient()
    yield client
    await client.aclose()


@pytest.fixture
def builtin_only() -> PluginHost:
    """A fresh host with entry-point autoload off: only provmw's own plugin."""
    return PluginHost(PluginPolicy(autoload=False), environ={})


def openai_config(fake: FakeProvider, **fields: object) -> ProviderConfig:
    values: dict[str, object] = {"identifier": "oa", "provider": "openai", "model": "gpt-test",
                                 "base_url": fake.openai_base_url, "api_key": SENTINEL_KEY}
    values.update(fields)
    return ProviderConfig(**values)  # type: ignore[arg-type]


def anthropic_config(fake: FakeProvider, **fields: object) -> ProviderConfig:
    values: dict[str, object] = {"identifier": "an", "provider": "anthropic", "model": "claude-test",
                                 "base_url": fake.anthropic_base_url, "api_key": SENTINEL_KEY}
    values.update(fields)
    return ProviderConfig(**values)  # type: ignore[arg-type]
