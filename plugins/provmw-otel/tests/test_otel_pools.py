"""A call on a pool: the call span names the pool and the deployment that served it, each attempt
span its deployment; a pool whose fallback served names none."""

from __future__ import annotations

from typing import Any

from otel_harness import KEY, fake_provider, recording, tree  # noqa: F401  (a fixture)
from provmw_otel import middleware
from provmw_otel.middleware import Telemetry
from provmw_otel.options import OtelOptions

from provmw import ServiceManager
from provmw.config import ProviderConfig
from provmw.plugins import PluginHost, PluginPolicy
from provmw.pools import Pool
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault


def pooled(fake: FakeProvider, telemetry: Telemetry) -> ServiceManager:
    """Pool "gpt" over "east" and "west" (in that order), falling back to "an"."""
    def config(identifier: str, model: str, **fields: Any) -> ProviderConfig:
        return ProviderConfig(identifier=identifier, provider="openai", model=model, base_url=fake.openai_base_url,
                              api_key=KEY, **fields)

    settings = Settings(
        configurations={"east": config("east", "dep-east"), "west": config("west", "dep-west"),
                        "an": ProviderConfig(identifier="an", provider="anthropic", model="claude-test",
                                             base_url=fake.anthropic_base_url, api_key=KEY)},
        pools={"gpt": Pool(name="gpt", members=("east", "west"), strategy="order", fallbacks=("an",))},
        middleware={"usage": {"store": "memory"}, "budget": {"store": "memory"}, "retry": {"enabled": False}})
    return ServiceManager(settings, host=PluginHost(PluginPolicy(autoload=False), environ={}),
                          middleware=middleware(OtelOptions(), telemetry, pools=settings.pools))


async def test_the_call_span_names_the_pool_and_the_deployment_that_served(fake: FakeProvider) -> None:
    with recording() as rec:
        async with pooled(fake, rec.telemetry) as m:
            await m.chat("hi", configuration="gpt")
        root, [attempt] = tree(rec.finished())
    assert root.attributes is not None and attempt.attributes is not None
    assert {k: root.attributes[k] for k in ("provmw.configuration", "provmw.pool", "provmw.deployment",
                                            "provmw.served_by")} == {
        "provmw.configuration": "gpt", "provmw.pool": "gpt", "provmw.deployment": "east", "provmw.served_by": "east"}
    assert attempt.attributes["provmw.configuration"] == "east"


async def test_a_pool_call_its_fallback_served_names_no_deployment(fake: FakeProvider) -> None:
    fake.script(Fault(status=503), model="dep-east")
    with recording() as rec:
        async with pooled(fake, rec.telemetry) as m:
            response = await m.chat("hi", configuration="gpt")
        root, _ = tree(rec.finished())
    assert response.served_by == "an" and root.attributes is not None
    assert "provmw.pool" not in root.attributes and "provmw.deployment" not in root.attributes
