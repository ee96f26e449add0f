"""Rerank and moderation through the manager's stack: served only by an adapter that offers them
(refused before any request elsewhere), priced from the bundled table, and cached when listed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from provmw.config import ProviderConfig
from provmw.errors import UnsupportedOperationError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import SENTINEL_KEY, openai_config


def rank_config(fake: FakeProvider) -> ProviderConfig:
    return ProviderConfig(identifier="rank", provider="cohere", model="rerank-v3.5", base_url=fake.url,
                          api_key=SENTINEL_KEY)


@pytest.fixture
async def manager(fake: FakeProvider, builtin_only: PluginHost, request: pytest.FixtureRequest
                  ) -> AsyncIterator[ServiceManager]:
    middleware: dict[str, Any] = getattr(request, "param", {})
    settings = Settings(configurations={"rank": rank_config(fake),
                                        "mod": openai_config(fake, identifier="mod", model="omni-moderation-latest")},
                        middleware=middleware)
    async with ServiceManager(settings, host=builtin_only) as built:
        yield built


async def test_rerank_on_an_adapter_without_it_is_refused_before_any_request(fake: FakeProvider,
                                                                             manager: ServiceManager) -> None:
    with pytest.raises(UnsupportedOperationError, match=r"'openai' \(configuration 'mod'\) .* 'rerank'"):
        await manager.rerank("q", ["a", "b"], configuration="mod")
    assert fake.count() == 0


async def test_moderation_on_an_adapter_without_it_is_refused_before_any_request(fake: FakeProvider,
                                                                                 manager: ServiceManager) -> None:
    with pytest.raises(UnsupportedOperationError, match="'moderation'"):
        await manager.moderate("hello", configuration="rank")
    assert fake.count() == 0


async def test_a_rerank_costs_its_search_units_at_the_bundled_price(manager: ServiceManager) -> None:
    response = await manager.rerank("red apple", ["pear", "red apple"] * 60, configuration="rank")
    assert dict(response.usage.units) == {"search_unit": 2.0}
    assert response.usage.cost_usd == pytest.approx(0.004)


async def test_a_moderation_is_priced_free_not_unknown(manager: ServiceManager) -> None:
    response = await manager.moderate(["hello", "kill"], configuration="mod")
    assert [r.flagged for r in response.results] == [False, True] and response.usage.cost_usd == 0.0


@pytest.mark.parametrize("manager", [{"cache": {"operations": ["rerank", "moderation"]}}], indirect=True)
async def test_rerank_and_moderation_are_cached_when_listed(fake: FakeProvider, manager: ServiceManager) -> None:
    first = await manager.rerank("apple", ["pear", "apple"], configuration="rank")
    again = await manager.rerank("apple", ["pear", "apple"], configuration="rank")
    await manager.moderate("hello", configuration="mod")
    verdict = await manager.moderate("hello", configuration="mod")
    assert again.cached and again.results == first.results and again.usage.saved_cost_usd == pytest.approx(0.002)
    assert verdict.cached and fake.count(route="rerank") == 1 and fake.count(route="moderations") == 1
