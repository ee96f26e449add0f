"""The plugin host: discovers plugins once, at the edge, and collects what their hooks contribute.

The hooks themselves are specified in :mod:`provmw.hookspecs`. pluggy finds and calls them
once, when a manager is built; it is never on the per-call path. provmw's own middleware and
providers come through the same hooks. The policy (autoload switch, allow and block lists of
``name`` or ``distribution:name``) and entry-point name clashes are decided from package
metadata before any plugin is imported; each hook's answer is checked where it is collected.
Provider decorators (``provmw_provider_decorators``) are applied once, after every adapter is
collected, by plugin name then in the order given (:mod:`provmw._plugins.decorations`).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import attrs
import pluggy

from provmw import hookspecs
from provmw._plugins.contributions import (
    ADAPTER,
    KEY_STORE,
    MIDDLEWARE,
    STATE_BACKEND,
    USAGE_STORE,
    Shape,
    iterable_answer,
)
from provmw._plugins.decorations import HOOK as DECORATORS_HOOK
from provmw._plugins.decorations import decorated
from provmw.context import FrozenMap
from provmw.errors import ConfigurationError, DuplicateMiddlewareError, PluginError, PluginLoadError, ProvmwError
from provmw.hookspecs import hookimpl, hookspec
from provmw.middleware import BUILTINS, USAGE, section_options, store_options
from provmw.options import did_you_mean
from provmw.providers import ProviderDecorator
from provmw.settings import PluginPolicy, PluginStatus, Settings, normalized_distribution
from provmw.stores.usage import is_store_url

if TYPE_CHECKING:
    from provmw.pipeline import Middleware
    from provmw.providers import ProviderAdapter
    from provmw.state import State
    from provmw.stores.shared import StateBackend
    from provmw.stores.usage import UsageStore

__all__ = [
    "ENTRY_POINT_GROUP",
    "BUILTIN_PLUGIN",
    "Contribution",
    "PluginHost",
    "PluginInfo",
    "PluginPolicy",
    "ProviderDecorator",
    "hookimpl",
    "hookspec",
    "refuse_clashes",
]

ENTRY_POINT_GROUP = "provmw"
BUILTIN_PLUGIN = "provmw"

log = logging.getLogger(__name__)


@attrs.frozen
class PluginInfo:
    """One plugin the host knows of and what became of it."""

    name: str
    distribution: str
    version: str
    status: PluginStatus
    error: str | None = None


@attrs.frozen
class Contribution:
    """A middleware and the plugin that contributed it."""

    middleware: Middleware
    plugin: str


class PluginHost:
    """Discovers plugins once and collects what their hooks contribute."""

    def __init__(self, policy: PluginPolicy | None = None, *,
                 environ: Mapping[str, str] | None = None) -> None:
        self.policy = (policy or PluginPolicy()).with_environment(
            os.environ if environ is None else environ
        )
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._infos: list[PluginInfo] = []
        self._loaded = False
        self._settings: Settings | None = None  # the last collected for: what providers are built from

    @property
    def plugins(self) -> tuple[PluginInfo, ...]:
        """Every plugin seen, built-in first, then entry points in name order."""
        return tuple(self._infos)

    def register(self, plugin: object, name: str, *, distribution: str = "", version: str = "") -> None:
        """Register a plugin object directly (tests, applications embedding their own)."""
        try:
            self._pm.register(plugin, name=name)
        except (ValueError, pluggy.PluginValidationError) as exc:
            raise PluginLoadError(f"plugin {name!r} could not be registered: {exc}") from exc
        self._infos.append(PluginInfo(name, distribution, version, "loaded"))

    def load(self, *, strict: bool = True) -> PluginHost:
        """Register the built-in plugin and every permitted entry point, once.

        With ``strict`` a plugin that fails raises ``PluginLoadError``; without, it is
        recorded as ``failed`` (what ``provmw plugins`` shows).
        """
        if self._loaded:
            return self
        self._loaded = True
        from provmw._plugins import builtin as _builtin

        self.register(_builtin, BUILTIN_PLUGIN, distribution="provmw", version=_version("provmw"))
        eps = _entry_points()
        # Clashes are found from metadata alone, before any plugin module is imported: importing
        # the impostor first would already run its code.
        _warn_unmatched(self.policy, eps)
        clashes = _clashes([ep for ep in eps if self.policy.status_of(ep.name, _distribution(ep)) is None])
        if clashes and strict:
            raise clashes[min(clashes)]
        for ep in eps:
            self._load_entry_point(ep, strict=strict, clash=clashes.get(ep.name))
        return self

    def _load_entry_point(self, ep: importlib.metadata.EntryPoint, *, strict: bool,
                          clash: PluginError | None = None) -> None:
        dist, version = _distribution(ep), ep.dist.version if ep.dist else "?"
        if (status := self.policy.status_of(ep.name, dist)) is not None:
            self._infos.append(PluginInfo(ep.name, dist, version, status))
            return
        if clash is not None:
            self._infos.append(PluginInfo(ep.name, dist, version, "failed", str(clash)))
            return
        try:
            plugin = ep.load()
            self.register(plugin, ep.name, distribution=dist, version=version)
        except Exception as exc:
            error = PluginLoadError(
                f"plugin {ep.name!r} from distribution {dist!r} failed to load: "
                f"{type(exc).__name__}: {exc}{_block_hint(ep.name)}"
            )
            if strict:
                raise error from exc
            log.warning("%s", error)
            self._infos.append(PluginInfo(ep.name, dist, version, "failed", str(error)))

    def collect_state(self, settings: Settings) -> StateBackend | None:
        """The backend serving ``[state]``, or None without one; exactly one plugin must serve it."""
        self._settings = settings
        if settings.state is None:
            return None
        answers = self._call("provmw_state_backend", many=False, settings=settings)
        found = _checked(answers, STATE_BACKEND, "provmw_state_backend")
        if len(found) > 1:
            raise PluginError(f"plugins {', '.join(repr(p) for p, _ in found)} all serve "
                              f"{settings.state.scheme}:// state; block all but one")
        if not found:
            which, why = self._unserved()
            raise ConfigurationError(
                f"{settings.source}: [state] url: no {which} plugin serves {settings.state.scheme}:// state{why}")
        backend: StateBackend = found[0][1]
        return backend

    def collect_ledger(self, settings: Settings) -> UsageStore | None:
        """The ledger store a plugin serves when ``[middleware.usage] store`` is a URL, else None
        (the embedded SQLite file or memory); exactly one plugin must serve the URL's scheme."""
        self._settings = settings
        url = section_options(settings, USAGE).store
        if not is_store_url(url):
            return None
        store: UsageStore = self._served_store(
            "usage", USAGE_STORE, url, store_options(settings, USAGE),
            where=f"{settings.source}: [middleware.usage] store", what="ledgers", built_in="sqlite, memory")
        return store

    def collect_key_store(self, url: str, options: Mapping[str, Any] | None = None, *,
                          where: str = "--keys") -> Any:
        """The ``provmw.gateway.KeyStore`` a plugin serves for ``url`` (``provmw serve --keys
        redis://...``); exactly one plugin must serve its scheme. Typed ``Any``: the gateway is above
        the host (ADR 0047), and ``provmw.gateway.keys.open_key_store`` gives it its type."""
        return self._served_store("key", KEY_STORE, url, options or {}, where=where, what="key stores",
                                  built_in="a file path or sqlite: URL (SQLite)")

    def _served_store(self, kind: str, shape: Shape, url: str, options: Mapping[str, Any], *, where: str,
                      what: str, built_in: str) -> Any:
        """The store that exactly one plugin's ``provmw_<kind>_store`` gives for ``url``; with none,
        an error naming the schemes ``provmw_<kind>_schemes`` says are served."""
        scheme, hook = urlsplit(url).scheme, f"provmw_{kind}_store"
        found = _checked(self._call(hook, many=False, url=url, options=FrozenMap(options)), shape, hook)
        if len(found) > 1:
            raise PluginError(f"{where}: plugins {', '.join(repr(p) for p, _ in found)} all serve {scheme}:// "
                              f"{what}; block all but one")
        if not found:
            schemes = sorted({s for _, served in self._call(f"provmw_{kind}_schemes") for s in served})
            which, why = self._unserved()
            raise ConfigurationError(
                f"{where}: no {which} plugin serves {scheme}:// {what}; built in: {built_in}; served by "
                f"plugins: {', '.join(schemes) or 'none'}{why}")
        return found[0][1]

    def _unserved(self) -> tuple[str, str]:
        """Why nothing answered for a URL scheme, as ("installed" or "loaded", a note): plugins
        installed but not loaded are named with their status, so a blocked one is not "missing"."""
        idle = self._idle_note()
        if idle:
            return "loaded", idle
        return "installed", " (redis:// is served by provmw-redis, postgresql:// by provmw-postgres)"

    def _idle_note(self) -> str:
        """Why an installed plugin may not answer: autoload is off, or some are not loaded; else ""."""
        if not self.policy.autoload:
            return " (plugin autoload is off)"
        idle = [f"{p.name} ({p.distribution}: {p.status})" for p in self._infos if p.status != "loaded"]
        return f" (installed but not loaded: {', '.join(idle)})" if idle else ""

    def collect_middleware(self, settings: Settings, state: State) -> tuple[Contribution, ...]:
        """Every enabled middleware contributed by loaded plugins, with its plugin's name."""
        self._settings = settings
        found: list[Contribution] = []
        for plugin, result in self._call("provmw_middleware", settings=settings, state=state):
            for middleware in result:
                MIDDLEWARE.check(middleware, plugin, "provmw_middleware")
                found.append(Contribution(middleware, plugin))
        _check_duplicates(found)
        _check_sections(settings, [c.middleware for c in found])
        return tuple(c for c in found if settings.enabled(c.middleware.name))

    def collect_providers(self, settings: Settings | None = None) -> Mapping[str, ProviderAdapter]:
        """Provider adapters by name, each decorated as plugins ask (``provmw_provider_decorators``);
        two adapters with one name are an error. ``settings`` default to those the host last
        collected state, the ledger or middleware for (a manager's), else to ``Settings()``."""
        settings = settings if settings is not None else self._settings or Settings()
        adapters: dict[str, ProviderAdapter] = {}
        for plugin, result in self._call("provmw_providers", settings=settings):
            for adapter in result:
                ADAPTER.check(adapter, plugin, "provmw_providers")
                if adapter.name in adapters:
                    raise PluginError(f"plugin {plugin!r} registers provider {adapter.name!r} twice over")
                adapters[adapter.name] = adapter
        return decorated(adapters, self._decorators(settings), self._idle_note())

    def _decorators(self, settings: Settings) -> list[tuple[str, ProviderDecorator]]:
        """Every ``(plugin, decorator)`` the plugins return; anything else is an error naming the plugin."""
        found = []
        for plugin, result in self._call(DECORATORS_HOOK, settings=settings):
            for decorator in result:
                if not isinstance(decorator, ProviderDecorator):
                    raise PluginError(f"plugin {plugin!r} returned from {DECORATORS_HOOK} a value of type "
                                      f"{type(decorator).__name__}, not a provmw.providers.ProviderDecorator")
                found.append((plugin, decorator))
        return found

    def _call(self, hook: str, *, many: bool = True, **kwargs: Any) -> list[tuple[str, Any]]:
        """Each plugin's answer to ``hook``; with ``many``, as a list (generators run here)."""
        self.load()
        results: list[tuple[str, Any]] = []
        for impl in reversed(getattr(self._pm.hook, hook).get_hookimpls()):
            try:
                result = impl.function(*(kwargs[name] for name in impl.argnames))
                results.append((impl.plugin_name, iterable_answer(result, impl.plugin_name, hook) if many else result))
            except ProvmwError:
                raise
            except Exception as exc:
                hint = _block_hint(impl.plugin_name) if impl.plugin_name != BUILTIN_PLUGIN else ""
                raise PluginError(f"plugin {impl.plugin_name!r} failed in {hook}: {exc}{hint}") from exc
        return results


def _check_duplicates(found: Sequence[Contribution]) -> None:
    """Two contributions with one name, named with both plugins (the pipeline alone cannot)."""
    first: dict[str, str] = {}
    for c in found:
        if (earlier := first.setdefault(c.middleware.name, c.plugin)) is not c.plugin:
            one, two = sorted((earlier, c.plugin))
            raise DuplicateMiddlewareError(
                f"two middleware are named {c.middleware.name!r}, from plugins {one!r} and {two!r}; "
                "block one (PROVMW_BLOCKED_PLUGINS or [plugins] block)")


def refuse_clashes(plugins: Mapping[str, str], own: Sequence[Middleware]) -> None:
    """An application's own middleware that takes a plugin's name: an error naming both sources
    (two plugins clash earlier, in the plugin host; two of the application's, in the pipeline)."""
    for layer in own:
        plugin = plugins.get(getattr(layer, "name", None))  # type: ignore[arg-type]
        if plugin is not None:
            raise DuplicateMiddlewareError(
                f"two middleware are named {layer.name!r}: one from plugin {plugin!r}, one from the application "
                "(ServiceManager(middleware=[...])); rename the application's middleware or block the plugin "
                "(PROVMW_BLOCKED_PLUGINS or [plugins] block)")


def _block_hint(name: str) -> str:
    return f"; to run without it, set PROVMW_BLOCKED_PLUGINS={name} (or add it to [plugins] block)"


def _warn_unmatched(policy: PluginPolicy, eps: Sequence[importlib.metadata.EntryPoint]) -> None:
    """Warn about allow/block entries that match nothing installed, naming what is installed."""
    installed = [(ep.name, _distribution(ep)) for ep in eps]
    shown = ", ".join(f"{name} (from {dist})" for name, dist in installed) or "none"
    for label, entry in policy.unmatched(installed):
        published = [name for name, dist in installed if normalized_distribution(dist) == entry]
        hint = (f"; {entry!r} is a distribution: write its plugin's name ({', '.join(published)})" if published
                else did_you_mean(entry, [name for name, _ in installed]))
        log.warning("plugin %s entry %r (PROVMW_%s or [plugins] %s) matches no installed plugin%s; installed: %s",
                    label, entry, "PLUGINS" if label == "allowlist" else "BLOCKED_PLUGINS",
                    "allow" if label == "allowlist" else "block", hint, shown)


def _check_sections(settings: Settings, middlewares: Sequence[Middleware]) -> None:
    # A disabled built-in is never built, but its section is still a known one.
    names = sorted({m.name for m in middlewares} | {b.name for b in BUILTINS})
    for section in settings.middleware:
        if section not in names:
            raise ConfigurationError(
                f"{settings.source}: [middleware.{section}] names no installed middleware"
                f"{did_you_mean(section, names)}; known: {', '.join(names) or 'none'}"
            )


def _checked(answers: list[tuple[str, Any]], shape: Shape, hook: str) -> list[tuple[str, Any]]:
    """The answers that are not None, each checked to have ``shape``."""
    found = [(plugin, value) for plugin, value in answers if value is not None]
    for plugin, value in found:
        shape.check(value, plugin, hook)
    return found


def _distribution(ep: importlib.metadata.EntryPoint) -> str:
    return ep.dist.name if ep.dist else "?"


def _clashes(eps: Sequence[importlib.metadata.EntryPoint]) -> dict[str, PluginError]:
    """An error for each entry-point name that more than one distribution publishes."""
    publishers: dict[str, dict[str, str]] = {}
    for ep in eps:
        dist = _distribution(ep)
        publishers.setdefault(ep.name, {})[normalized_distribution(dist)] = dist
    return {
        name: PluginError(f"plugin {name!r} is published by {len(dists)} distributions: "
                          f"{', '.join(sorted(dists.values()))}; none was imported. Uninstall one, or name the "
                          f"one to load as distribution:name in the allowlist (or block the other the same way)")
        for name, dists in publishers.items() if len(dists) > 1
    }


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    return sorted(eps, key=lambda ep: (ep.name, ep.dist.name if ep.dist else ""))


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"
