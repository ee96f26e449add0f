"""The plugin's hook: both layers when installed, neither when its section says ``enabled = false``."""

from __future__ import annotations

import provmw_otel

from provmw import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import Settings


def host() -> PluginHost:
    found = PluginHost(PluginPolicy(autoload=False), environ={})
    found.register(provmw_otel, "otel")
    return found


def test_an_installed_plugin_adds_the_call_layer_outermost_and_the_attempt_layer_innermost() -> None:
    order = ServiceManager(Settings(middleware={"usage": {"store": "memory"}}), host=host()).pipeline.order
    assert (order[0], order[-1]) == ("otel", "otel_attempts")


def test_enabled_false_removes_both_layers_and_is_no_unknown_section() -> None:
    settings = Settings(middleware={"usage": {"store": "memory"}, "otel": {"enabled": False}})
    order = ServiceManager(settings, host=host()).pipeline.order
    assert "otel" not in order and "otel_attempts" not in order
