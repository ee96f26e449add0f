"""Which key store ``--keys`` names: a SQLite file for one host, or a URL a plugin serves for a fleet.

::

    provmw serve --keys /srv/provmw/keys.sqlite3              # SqliteKeyStore (also sqlite:PATH)
    provmw serve --keys postgresql://gateway@db.internal/ops  # provmw-postgres: PostgresKeyStore
    provmw serve --keys redis://cache.internal:6379/0         # provmw-redis: RedisKeyStore

A URL goes to the plugins' ``provmw_key_store`` hook, like the usage ledger's ``store``, with the
``[state]`` backend's options when it is of the same scheme (its ``key_prefix``, timeouts); a
scheme no plugin serves is a ``ConfigurationError`` naming the schemes that are served. Every
host (and worker) that names one store sees a key disabled or a budget set on any of them within
the cache's TTL (``KeyCache``), without a restart (ADR 0055).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from provmw.errors import ConfigurationError
from provmw.gateway._keys_sqlite import SqliteKeyStore
from provmw.gateway.keys import keys_path
from provmw.plugins import PluginHost
from provmw.stores.usage import is_store_url

if TYPE_CHECKING:
    from provmw.gateway.keys import KeyStore
    from provmw.settings import Settings

__all__ = ["key_location", "open_key_store"]


def key_location(location: str | None, settings: Settings) -> Path | str:
    """Where ``--keys`` puts the key store: a SQLite file's ``Path`` (for a path, ``sqlite:PATH``,
    ``sqlite:///PATH``, or None: the default beside the ledger), or the URL a plugin serves."""
    if location is None:
        return keys_path(settings)
    if location.startswith("sqlite:"):
        parts = urlsplit(location)
        if parts.netloc or not parts.path or parts.query or parts.fragment:
            raise ConfigurationError(f"--keys: a SQLite key store is sqlite:PATH or sqlite:///PATH, got {location!r}")
        return Path(parts.path)
    return location if is_store_url(location) else Path(location)


def open_key_store(location: str | None, settings: Settings, *, host: PluginHost | None = None) -> KeyStore:
    """The key store at ``location`` (see ``key_location``): a ``SqliteKeyStore`` for a file, else the
    store of the plugin serving the URL's scheme, asked of ``host`` (default: the settings' plugins).
    Nothing is connected yet: a store connects on first use."""
    place = key_location(location, settings)
    if isinstance(place, Path):
        return SqliteKeyStore(place)
    # A store of the shared state's own kind takes its options (key_prefix, timeouts): two deployments
    # that share one Redis by their prefixes must not share their keys (ADR 0055).
    state = settings.state
    options = state.options if state is not None and state.scheme == urlsplit(place).scheme else None
    store: KeyStore = (host or PluginHost(settings.plugins)).collect_key_store(place, options, where="--keys")
    return store
