"""provmw's own plugin: registers the built-in middleware and providers through the same
hooks as any third-party plugin."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from provmw.plugins import hookimpl

if TYPE_CHECKING:
    from provmw.pipeline import Middleware
    from provmw.providers import ProviderAdapter
    from provmw.settings import Settings
    from provmw.stores.shared import StateBackend


@hookimpl
def provmw_middleware(settings: Settings, state: StateBackend | None) -> Iterable[Middleware]:
    """The built-in middleware; each reads its own ``[middleware.<name>]`` section, and keeps its
    state in ``state`` when ``[state] shared`` lists it."""
    from provmw.middleware import builtin_middleware

    return builtin_middleware(settings, state)


@hookimpl
def provmw_providers() -> Iterable[ProviderAdapter]:
    from provmw.providers.anthropic import AnthropicAdapter
    from provmw.providers.openai import OpenAIAdapter

    return (OpenAIAdapter(), AnthropicAdapter())
