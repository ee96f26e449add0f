"""Provider decorators applied: once, after every adapter is collected, in an order that never
depends on install or discovery order.

Decorators run by plugin name, then in the order each plugin gave them: the first applied is
the innermost, the last the outermost (it sees a call first). Each answer is checked where it
is made, so a wrapper that drops what the wrapped adapter declares is named at build time, not
found when an ad-hoc call sends credentials the adapter would have kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from provmw._plugins.contributions import ADAPTER
from provmw.errors import PluginError, ProvmwError
from provmw.options import did_you_mean
from provmw.providers import ALL_PROVIDERS, OPTIONAL_MEMBERS, Capabilities, ProviderAdapter, ProviderDecorator

__all__ = ["HOOK", "decorated"]

HOOK = "provmw_provider_decorators"


def decorated(adapters: Mapping[str, ProviderAdapter], decorators: Sequence[tuple[str, ProviderDecorator]],
              note: str = "") -> dict[str, ProviderAdapter]:
    """``adapters`` with each ``(plugin, decorator)`` applied; a name nobody installed is an error
    naming the installed ones (``note`` says why some may be missing)."""
    ordered = sorted(decorators, key=lambda found: found[0])  # stable: each plugin's own order is kept
    for plugin, decorator in ordered:
        _check_known(decorator, plugin, adapters, note)
    wrapped = dict(adapters)
    for plugin, decorator in ordered:
        for name in sorted(wrapped):
            if decorator.applies_to(name):
                wrapped[name] = _applied(decorator, plugin, wrapped[name])
    return wrapped


def _check_known(decorator: ProviderDecorator, plugin: str, adapters: Mapping[str, ProviderAdapter],
                 note: str) -> None:
    if decorator.provider == ALL_PROVIDERS or decorator.provider in adapters:
        return
    names = sorted(adapters)
    raise PluginError(f"plugin {plugin!r} decorates provider {decorator.provider!r}, which no installed plugin "
                      f"provides{did_you_mean(decorator.provider, names)}; installed: {', '.join(names) or 'none'}"
                      f"{note}")


def _applied(decorator: ProviderDecorator, plugin: str, adapter: ProviderAdapter) -> ProviderAdapter:
    """``decorator.wrap(adapter)``, checked to be an adapter that reads as ``adapter`` does."""
    try:
        result = decorator.wrap(adapter)
    except ProvmwError:
        raise
    except Exception as exc:
        raise PluginError(f"plugin {plugin!r} failed in {HOOK} decorating provider {adapter.name!r}: "
                          f"{type(exc).__name__}: {exc}") from exc
    ADAPTER.check(result, plugin, f"{HOOK} (decorating provider {adapter.name!r})")
    if differs := _differences(adapter, result):
        raise PluginError(f"plugin {plugin!r} decorated provider {adapter.name!r} with a {type(result).__name__} "
                          f"that does not read as the adapter it wraps: {'; '.join(differs)}; forward them "
                          "(subclass provmw.providers.ForwardingAdapter)")
    return result


def _differences(inner: object, outer: object) -> list[str]:
    """What ``outer`` declares otherwise than ``inner``: its name, an optional member, capabilities dropped."""
    found = [f"{member} is {_read(outer, member)!r}, not {_read(inner, member)!r}"
             for member in ("name", *OPTIONAL_MEMBERS) if _read(outer, member) != _read(inner, member)]
    declared = getattr(inner, "capabilities", None)
    if isinstance(declared, Capabilities) and not isinstance(getattr(outer, "capabilities", None), Capabilities):
        found.append(f"capabilities are not declared, while the wrapped adapter declares {declared!r}")
    return found


def _read(adapter: object, member: str) -> object:
    # As the manager reads them (provmw._call.ad_hoc): anything but True is no ambient credential.
    value = getattr(adapter, member, None)
    return value is True if member == "ambient_credentials" else value
