"""3,000 invented model names through a ServiceManager leave every per-name map within its
bound (issue #16, finding 10)."""

from __future__ import annotations

from typing import Any

import attrs

from provmw._base.bounded import MAX_NAMES
from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.manager import ServiceManager
from provmw.pipeline import Next, R
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import LOOPBACK_ALLOWED, openai_config

NAMES = 3_000


class InventedNames:
    """Stands in for ad-hoc calls (which a destination policy may keep off loopback): each call
    goes out as ``ad-hoc:openai/<a model never named before>``, past every per-name layer."""

    name, priority = "invented_names", 900

    def __init__(self) -> None:
        self.calls = 0

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        self.calls += 1
        model = f"invented-{self.calls}"
        return await next(attrs.evolve(config, identifier=f"ad-hoc:openai/{model}", model=model))


def layer(manager: ServiceManager, name: str) -> Any:
    return next(m for m in manager.pipeline.middlewares if m.name == name)


async def test_invented_model_names_leave_every_per_name_map_within_its_bound(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    settings = Settings(configurations={"oa": openai_config(fake)}, default="oa", destinations=LOOPBACK_ALLOWED,
                        middleware={"usage": {"store": "memory"},
                                    "rate_limit": {"limits": {"*": {"requests_per_minute": 10**9}}}})
    async with ServiceManager(settings, host=builtin_only, middleware=[InventedNames()]) as manager:
        for _ in range(NAMES):
            await manager.chat("hi")
        sizes = {"retry budgets": len(layer(manager, "retry").budgets),
                 "breakers": len(layer(manager, "circuit_breaker").store._breakers),
                 "rate limits": len(layer(manager, "rate_limit").limiter._states),
                 "prices": len(manager.prices._found)}
    assert fake.count() == NAMES
    assert sizes == dict.fromkeys(sizes, MAX_NAMES)
