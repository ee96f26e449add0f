"""A call on a pool, in the call log: ``config=`` is the pool the caller named, ``served_by=`` the
deployment that answered."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from provmw_calllog import CallLogMiddleware

from provmw.config import ProviderConfig
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.pools import Pool
from provmw.settings import Settings
from provmw.testing import FakeProvider


@pytest.fixture(name="fake")
async def fake_provider() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as server:
        yield server


def deployment(fake: FakeProvider, identifier: str) -> ProviderConfig:
    return ProviderConfig(identifier=identifier, provider="openai", model=f"dep-{identifier}",
                          base_url=fake.openai_base_url, api_key="sk-calllog-SECRET")


async def test_the_line_names_the_pool_asked_and_the_deployment_that_served(
        fake: FakeProvider, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="provmw.calls")
    settings = Settings(configurations={name: deployment(fake, name) for name in ("east", "west")},
                        pools={"gpt": Pool(name="gpt", members=("east", "west"), strategy="order")},
                        middleware={"usage": {"store": "memory"}, "budget": {"store": "memory"}})
    host = PluginHost(PluginPolicy(autoload=False), environ={})
    async with ServiceManager(settings, host=host, middleware=[CallLogMiddleware()]) as manager:
        await manager.chat("hi", configuration="gpt", controls={"deployment": "west"})
    [record] = [r for r in caplog.records if r.name == "provmw.calls"]
    assert " config=gpt " in record.getMessage() and " served_by=west " in record.getMessage()
