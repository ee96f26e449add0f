"""The wire formats of the first-party provider plugins, for ``provmw demo`` when installed.

Each plugin serves its format from ``provmw.testing.FakeProvider`` through a ``FakeWire``
of its own; the demo adds the wires of the plugins the host loaded, and one configuration
on each, so one story shows the same stack in front of every wire.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Mapping
from typing import Any

import attrs

from provmw.config import ProviderConfig
from provmw.testing import FakeProvider, FakeWire

__all__ = ["PLUGIN_WIRES", "PluginWire"]


@attrs.frozen
class PluginWire:
    """A plugin's wire: its provider, its ``FakeWire`` class, and how a configuration reaches it."""

    provider: str
    wire: str  # "module:Class"
    model: str
    base_path: str = ""
    fields: Mapping[str, Any] = attrs.Factory(dict)

    def make(self) -> FakeWire:
        module, _, name = self.wire.partition(":")
        made: FakeWire = getattr(importlib.import_module(module), name)()
        return made

    def configuration(self, fake: FakeProvider, price: Mapping[str, float]) -> ProviderConfig:
        return ProviderConfig(identifier=self.provider, provider=self.provider, model=self.model,
                              base_url=fake.url + self.base_path, price=price, **self.fields)


PLUGIN_WIRES = (
    PluginWire("gemini", "provmw_gemini.fake:GeminiWire", "gemini-2.5-flash", "/v1beta",
               {"api_key": "demo-not-a-real-key"}),
    PluginWire("azure", "provmw_azure.fake:AzureWire", "gpt-4o-prod", "", {"api_key": "demo-not-a-real-key"}),
    PluginWire("bedrock", "provmw_bedrock.fake:BedrockWire", "anthropic.claude-3-haiku-20240307-v1:0", "",
               {"api_key": "demo-not-a-real-key"}),
)


def installed(providers: Collection[str]) -> tuple[PluginWire, ...]:
    """The plugin wires whose adapter the host loaded."""
    return tuple(w for w in PLUGIN_WIRES if w.provider in providers)
