"""Entra ID bearer tokens: the application's token provider, cached and refreshed before expiry.

A token provider is any ``async () -> (token, expires_at)`` (``expires_at`` in seconds since
the epoch, as ``azure.identity``'s ``AccessToken.expires_on``). An application registers one
under the entry-point group ``provmw_azure.token_provider``::

    # the application's pyproject.toml
    [project.entry-points."provmw_azure.token_provider"]
    entra = "myapp.auth:azure_token"

    # myapp/auth.py
    from azure.identity.aio import DefaultAzureCredential

    _credential = DefaultAzureCredential()

    async def azure_token() -> tuple[str, float]:
        token = await _credential.get_token("https://cognitiveservices.azure.com/.default")
        return token.token, token.expires_on

``TokenCache`` asks the provider only when no token is cached or the cached one expires
within ``refresh_margin_s``, and then once however many calls are waiting. The token is
never logged nor put in an error.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import math
import re
import time
from collections.abc import Awaitable, Callable

import attrs

from provmw.errors import AuthenticationError, PluginError

__all__ = ["ENTRY_POINT_GROUP", "AccessToken", "TokenCache", "TokenProvider", "registered_token_provider"]

ENTRY_POINT_GROUP = "provmw_azure.token_provider"

TokenProvider = Callable[[], Awaitable[tuple[str, float]]]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@attrs.frozen
class AccessToken:
    """A bearer token, when it expires and when to ask for the next (seconds since the epoch);
    its repr hides the token."""

    token: str = attrs.field(repr=False)
    expires_at: float
    refresh_at: float


class TokenCache:
    """One application token provider behind a cache that refreshes ``refresh_margin_s`` before
    expiry, or halfway through the life of a token that lives shorter than twice the margin."""

    def __init__(self, provider: TokenProvider, *, clock: Callable[[], float] = time.time,
                 refresh_margin_s: float = 300.0) -> None:
        self._provider = provider
        self._clock = clock
        self._margin_s = refresh_margin_s
        self._current: AccessToken | None = None
        self._lock = asyncio.Lock()

    async def token(self) -> AccessToken:
        """A token not yet due for refresh; concurrent callers share one refresh."""
        current = self._current
        if current is not None and self._fresh(current):
            return current
        async with self._lock:
            current = self._current  # the task that held the lock may have refreshed it
            if current is None or not self._fresh(current):
                current = self._current = await self._fetch()
            return current

    def _fresh(self, current: AccessToken) -> bool:
        return self._clock() < current.refresh_at

    async def _fetch(self) -> AccessToken:
        try:
            token, expires_at = await self._provider()
        except Exception as exc:
            raise AuthenticationError(f"the Entra ID token provider failed: {type(exc).__name__}: {exc}",
                                      provider="azure") from exc
        now = self._clock()
        expires = _usable_expiry(token, expires_at, now)
        # A token that lives shorter than twice the margin is renewed halfway, not on every call.
        return AccessToken(token, expires, refresh_at=expires - min(self._margin_s, (expires - now) / 2))


def _usable_expiry(token: object, expires_at: object, now: float) -> float:
    """``expires_at`` as a float once ``token`` and it are usable, else an ``AuthenticationError``."""
    if not isinstance(token, str) or not token or _CONTROL.search(token):
        raise AuthenticationError("the Entra ID token provider returned no usable token "
                                  "(a non-empty string without control characters)", provider="azure")
    if isinstance(expires_at, bool) or not isinstance(expires_at, int | float) \
            or not math.isfinite(expires_at) or expires_at <= now:
        raise AuthenticationError(f"the Entra ID token provider returned a token expiring at {expires_at!r}, "
                                  "not a time in the future (seconds since the epoch)", provider="azure")
    return float(expires_at)


def registered_token_provider() -> TokenProvider | None:
    """The token provider an installed package registers under ``ENTRY_POINT_GROUP``, if any."""
    found = sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)
    if not found:
        return None
    if len(found) > 1:
        named = ", ".join(f"{ep.name} = {ep.value}" for ep in found)
        raise PluginError(f"{len(found)} Entra ID token providers are registered under {ENTRY_POINT_GROUP} "
                          f"({named}); keep one")
    provider = found[0].load()
    if not callable(provider):
        raise PluginError(f"the Entra ID token provider {found[0].value} is not callable")
    return provider  # type: ignore[no-any-return]
