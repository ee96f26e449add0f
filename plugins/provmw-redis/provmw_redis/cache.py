"""The shared response cache: JSON text under namespaced keys, optionally signed, with fill claims.

An entry is the middleware's JSON text, or with a signing key ``s1:<hmac>:<text>`` where
the HMAC-SHA256 covers the cache key and the text: an entry altered, forged, or copied
under another key (another tenant's) fails verification and is a miss. Nothing read back
is ever unpickled; bytes that are not UTF-8 are a miss too. While Redis is down every
method raises ``RedisUnavailableError``, which the core's outage rule turns into a miss.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import uuid
from typing import TYPE_CHECKING

from provmw_redis.backend import milliseconds

if TYPE_CHECKING:
    from provmw_redis.backend import RedisState

__all__ = ["RedisCacheStore"]

log = logging.getLogger(__name__)

_SIGNED = "s1:"


class RedisCacheStore:
    """A ``CacheStore`` in Redis; one round trip per read, write or claim."""

    def __init__(self, state: RedisState) -> None:
        self._state = state
        self._client = state.client
        self._prefix = f"{state.options.key_prefix}:cache:"
        self._secret = None if state.signing_key is None else state.signing_key.reveal().encode()
        self._unclaim = state.script("cache_unclaim")

    async def get(self, key: str) -> str | None:
        raw = await self._state.run(lambda: self._client.get(self._prefix + key))
        if raw is None:
            return None
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError:
            log.warning("cache: an entry that is not UTF-8 text under %s is a miss", key[:24])
            return None
        return text if self._secret is None else self._verified(key, text)

    async def set(self, key: str, value: str, ttl_s: float) -> None:
        text = value if self._secret is None else f"{_SIGNED}{self._sign(key, value)}:{value}"
        await self._state.run(lambda: self._client.set(self._prefix + key, text, px=milliseconds(ttl_s)))

    async def delete(self, key: str) -> None:
        await self._state.run(lambda: self._client.delete(self._prefix + key))

    async def claim(self, key: str, ttl_s: float) -> str | None:
        token = uuid.uuid4().hex
        claimed = await self._state.run(
            lambda: self._client.set(f"{self._prefix}{key}:claim", token, nx=True, px=milliseconds(ttl_s)))
        return token if claimed else None

    async def unclaim(self, key: str, token: str) -> None:
        await self._state.run(lambda: self._unclaim(keys=[f"{self._prefix}{key}:claim"], args=[token]))

    def _sign(self, key: str, text: str) -> str:
        assert self._secret is not None
        return hmac.new(self._secret, f"{key}\n{text}".encode(), hashlib.sha256).hexdigest()

    def _verified(self, key: str, text: str) -> str | None:
        signature, _, body = text.removeprefix(_SIGNED).partition(":")
        if text.startswith(_SIGNED) and hmac.compare_digest(signature, self._sign(key, body)):
            return body
        log.warning("cache: an entry under %s fails its signature and is a miss", key[:24])
        return None
