"""provmw's own plugin: registers the built-in middleware and providers through the same
hooks as any third-party plugin."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from provmw.hookspecs import hookimpl

if TYPE_CHECKING:
    from provmw.pipeline import Middleware
    from provmw.providers import ProviderAdapter
    from provmw.settings import Settings
    from provmw.state import State


@hookimpl
def provmw_middleware(settings: Settings, state: State) -> Iterable[Middleware]:
    """The enabled built-in middleware, each configured from its ``[middleware.<name>]`` section
    and handed its store by ``state``."""
    from provmw.middleware import builtin_middleware

    return builtin_middleware(settings, state)


@hookimpl
def provmw_providers() -> Iterable[ProviderAdapter]:
    from provmw.providers.anthropic import AnthropicAdapter
    from provmw.providers.cohere import CohereAdapter
    from provmw.providers.openai import OpenAIAdapter

    return (OpenAIAdapter(), AnthropicAdapter(), CohereAdapter())
