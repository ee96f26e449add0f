"""provmw-redis: the cache, budgets, circuit breakers, rate limits and pools shared across processes and hosts.

Install it and name the server in the settings; nothing else changes::

    [state]
    url = "redis://127.0.0.1:6379/0"     # or rediss://, unix://
    key_prefix = "provmw"                # keys of separate deployments must not meet
    timeout_s = 0.5                      # per Redis command; a paused server counts as down
    retry_s = 1.0                        # how long a down server is skipped before trying again
    signing_key_env = "PROVMW_CACHE_SIGNING_KEY"  # the default: the secret that signs cache entries
    unsigned_cache = false               # true: share the cache unsigned when no key is set (logged)
    slot_lease_s = 300                   # a dead process's concurrency slots and pool calls free after this
    probe_lease_s = 120                  # half-open probes silent this long are presumed dead

``[state] shared`` picks the concerns that live in Redis (all of them by default). Sharing the
cache or the idempotency store needs the signing key: without it the backend refuses to start.

It also keeps the gateway's virtual keys for a fleet (``provmw_redis.keys``)::

    provmw serve --keys redis://127.0.0.1:6379/0     # every host: one key store
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import provmw

if TYPE_CHECKING:
    from provmw.settings import Settings
    from provmw_redis.backend import RedisOptions, RedisState, RedisUnavailableError
    from provmw_redis.keys import RedisKeyStore

__all__ = ["SCHEMES", "RedisKeyStore", "RedisOptions", "RedisState", "RedisUnavailableError", "provmw_key_schemes",
           "provmw_key_store", "provmw_state_backend"]

SCHEMES = ("redis", "rediss", "unix")


@provmw.hookimpl
def provmw_state_backend(settings: Settings) -> RedisState | None:
    """The Redis backend when ``[state] url`` is a Redis URL."""
    state = settings.state
    if state is None or state.scheme not in SCHEMES:
        return None
    from provmw_redis.backend import RedisState

    return RedisState(state, settings.source)


@provmw.hookimpl
def provmw_key_store(url: str, options: Mapping[str, Any]) -> RedisKeyStore | None:
    """The Redis key store when ``provmw serve --keys`` (or ``provmw keys --keys``) is a Redis URL."""
    if urlsplit(url).scheme not in SCHEMES:
        return None
    from provmw_redis.keys import RedisKeyStore

    return RedisKeyStore.from_url(url, options)


@provmw.hookimpl
def provmw_key_schemes() -> Iterable[str]:
    return SCHEMES


def __getattr__(name: str) -> Any:
    # redis is imported once a [state] names it, not by every process that has the plugin installed.
    if name in ("RedisOptions", "RedisState", "RedisUnavailableError"):
        return getattr(importlib.import_module("provmw_redis.backend"), name)
    if name == "RedisKeyStore":
        return importlib.import_module("provmw_redis.keys").RedisKeyStore
    raise AttributeError(f"module 'provmw_redis' has no attribute {name!r}")
