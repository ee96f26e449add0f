"""``provmw check``: every problem a first call would meet, found up front and listed at once.

Calls read a configuration's key variables only when they first use it (so a fallback that
never runs needs no key); this is the place that looks at all of them before anything runs:
the settings file, every configuration's ``api_key_env`` and ``headers_env`` variables (and a
``base_url`` that carries credentials besides them), the plugin policy and the plugins, and
everything the stack is built from (middleware sections, providers, the
``[state]`` URL and the plugin serving it). Nothing is sent to a provider; a state server that
keeps budgets is asked whether it keeps them across its own restart (Redis: persistence).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from provmw.errors import ProvmwError
from provmw.scrubbing import masked_url, url_secrets
from provmw.settings import Settings, load_settings

if TYPE_CHECKING:
    from provmw.manager import ServiceManager

__all__ = ["keys_given_twice", "locations", "missing_variables", "problems"]


async def problems(path: str | os.PathLike[str] | None = None,
                   environ: Mapping[str, str] | None = None) -> list[str]:
    """Every problem found in the settings and what they name; empty when all is well."""
    environ = os.environ if environ is None else environ
    try:
        settings = load_settings(path, environ)
    except ProvmwError as exc:
        return [str(exc)]  # nothing else can be checked without the settings
    return [*missing_variables(settings), *keys_given_twice(settings), *await _stack_problems(settings, environ)]


def locations(path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """Where the settings come from and where the usage ledger is; nothing when the settings do not load."""
    from provmw.middleware import USAGE, section_options
    from provmw.stores.shared import masked_url

    try:
        settings = load_settings(path, environ)
        ledger = section_options(settings, USAGE)
    except ProvmwError:
        return []
    kept = {"sqlite": ledger.path, "memory": "in memory only (store = \"memory\")"}.get(ledger.store)
    return [f"settings: {settings.source}", f"usage ledger: {kept or masked_url(ledger.store)}"]


def missing_variables(settings: Settings) -> Iterator[str]:
    """One line per key or header variable a configuration names and the environment lacks."""
    for config in settings.configurations.values():
        named = [("api_key_env", config.api_key_env)] if config.api_key_env else []
        named += [(f"headers_env.{header}", variable) for header, variable in config.headers_env.items()]
        for key, variable in named:
            if variable not in settings.environ:
                yield (f"{settings.source}: [configurations.{config.identifier}] {key}: "
                       f"environment variable {variable} is not set")


def keys_given_twice(settings: Settings) -> Iterator[str]:
    """One line per configuration whose ``base_url`` carries credentials (a user part, a key in its
    query) while ``api_key_env`` names a key too: its first call would fail, or send two keys."""
    for config in settings.configurations.values():
        if config.api_key_env and url_secrets(config.base_url):
            yield (f"{settings.source}: [configurations.{config.identifier}] base_url {masked_url(config.base_url)} "
                   f"carries credentials and api_key_env is set too: give the key one way (api_key_env, or the URL)")


async def _stack_problems(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    from provmw.manager import ServiceManager
    from provmw.plugins import PluginHost

    try:
        host = PluginHost(settings.plugins, environ=environ).load(strict=False)
    except ProvmwError as exc:  # the plugin policy itself (its environment variables) does not hold
        return [str(exc)]
    found = [info.error or f"plugin {info.name!r} failed" for info in host.plugins if info.status == "failed"]
    try:
        manager = ServiceManager(settings, host=host)  # a failed plugin is left out, as reported above
    except ProvmwError as exc:
        return [*found, str(exc)]
    try:
        found += await _budget_state_problems(manager)
    finally:
        await manager.aclose()
    return found


async def _budget_state_problems(manager: ServiceManager) -> list[str]:
    """What the shared state keeping the budgets reports against them (Redis: no persistence, so a
    restart forgets the spend); asked only when a budget is in the stack and kept there."""
    shared, ask = manager.state.shared, getattr(manager.state.shared, "budget_problems", None)
    if shared is None or ask is None or "budget" not in manager.state.shared_concerns or \
            "budget" not in manager.pipeline.order:
        return []
    problems: list[str] = await ask()
    return problems
