"""The hooks a provmw plugin may implement, and the markers for them.

A plugin is a module (or any object) with functions marked ``@provmw.hookimpl``,
published under the entry-point group ``provmw``::

    # pyproject.toml of the plugin package
    [project.entry-points.provmw]
    my_plugin = "my_plugin"

    # my_plugin.py
    import provmw
    from provmw.settings import options_from

    @provmw.hookimpl
    def provmw_middleware(settings):
        options = options_from(MyOptions, settings.section("my_middleware"), "[middleware.my_middleware]")
        return [MyMiddleware(options)]

An implementation may take fewer arguments than its specification (pluggy passes only
those it names). This module imports nothing of provmw at run time, so the plugin host and
the settings never import each other through it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from provmw.pipeline import Middleware
    from provmw.providers import ProviderAdapter, ProviderDecorator
    from provmw.settings import Settings
    from provmw.state import State
    from provmw.stores.shared import StateBackend
    from provmw.stores.usage import UsageStore

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "provmw"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def provmw_middleware(settings: Settings, state: State) -> Iterable[Middleware]:
    """Return the middleware this plugin contributes, built from ``settings``; ``state`` hands out
    each concern's store (embedded, or shared where ``[state]`` says so)."""
    raise NotImplementedError  # pragma: no cover - a specification, never called


@hookspec
def provmw_state_backend(settings: Settings) -> StateBackend | None:
    """Return a shared state backend when this plugin serves ``settings.state.url``'s scheme."""
    raise NotImplementedError  # pragma: no cover - a specification, never called


@hookspec
def provmw_usage_store(url: str, options: Mapping[str, Any]) -> UsageStore | None:
    """Return a usage ledger store when this plugin serves ``url``'s scheme (``[middleware.usage]
    store = "postgresql://..."``); ``options`` are the section's other keys."""
    raise NotImplementedError  # pragma: no cover - a specification, never called


@hookspec
def provmw_usage_schemes() -> Iterable[str]:
    """Return the URL schemes this plugin's ``provmw_usage_store`` serves (``postgresql``), so an
    unserved scheme's error can name the installed ones."""
    raise NotImplementedError  # pragma: no cover - a specification, never called


@hookspec
def provmw_key_store(url: str, options: Mapping[str, Any]) -> object | None:
    """Return a ``provmw.gateway.KeyStore`` when this plugin serves ``url``'s scheme (``provmw serve
    --keys postgresql://...``: every host of a fleet reads one store); ``options`` are the store's own
    keys. Typed ``object`` here: the hook specs sit below the gateway (ADR 0047)."""
    raise NotImplementedError  # pragma: no cover - a specification, never called


@hookspec
def provmw_key_schemes() -> Iterable[str]:
    """Return the URL schemes this plugin's ``provmw_key_store`` serves (``redis``), so an unserved
    scheme's error can name the installed ones."""
    raise NotImplementedError  # pragma: no cover - a specification, never called


@hookspec
def provmw_providers(settings: Settings) -> Iterable[ProviderAdapter]:
    """Return the provider adapters this plugin contributes, each with a unique ``name``, built
    from ``settings`` if it needs them (an implementation without the argument is still called)."""
    raise NotImplementedError  # pragma: no cover - a specification, never called


@hookspec
def provmw_provider_decorators(settings: Settings) -> Iterable[ProviderDecorator]:
    """Return ``provmw.providers.ProviderDecorator`` values wrapping installed adapters by name,
    this plugin's or any other's (``"*"``: every one); applied once, after every adapter is collected,
    in plugin-name order, then in the order given (the last applied is the outermost)."""
    raise NotImplementedError  # pragma: no cover - a specification, never called
