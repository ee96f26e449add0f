"""The shared response cache: JSON text under namespaced keys, signed, with fill claims.

With a signing key (the default: see ``[state] unsigned_cache``) an entry is
``s2:<expires_ms>:<hmac>:<text>`` where the HMAC-SHA256 covers the whole Redis key, the
expiry and the text: an entry altered, forged, copied under another key (another tenant's),
or written back after its expiry fails verification and is a miss (the first one logged as
a warning). Without a key an entry is the middleware's JSON text. Nothing read back is ever
unpickled; bytes that are not UTF-8 are a miss too. While Redis is down every method raises
``RedisUnavailableError``, which the core's outage rule turns into a miss.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from provmw_redis.backend import milliseconds

if TYPE_CHECKING:
    from provmw_redis.backend import RedisState

__all__ = ["RedisCacheStore"]

log = logging.getLogger(__name__)

_SIGNED = "s2:"


class RedisCacheStore:
    """A ``CacheStore`` in Redis; one round trip per read, write or claim."""

    def __init__(self, state: RedisState, clock: Callable[[], float] = time.time) -> None:
        self._state = state
        self._clock = clock  # wall clock: the expiry inside a signed entry is read on other hosts
        self._refusals = 0
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
        text = value if self._secret is None else self._signed(key, value, ttl_s)
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

    def _signed(self, key: str, value: str, ttl_s: float) -> str:
        expires_ms = str(round((self._clock() + ttl_s) * 1000))
        return f"{_SIGNED}{expires_ms}:{self._sign(key, expires_ms, value)}:{value}"

    def _sign(self, key: str, expires_ms: str, text: str) -> str:
        assert self._secret is not None
        # The whole Redis key is signed, prefix included: an entry is valid only where it was written.
        message = f"{self._prefix}{key}\n{expires_ms}\n{text}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def _verified(self, key: str, text: str) -> str | None:
        expires_ms, _, rest = text.removeprefix(_SIGNED).partition(":")
        signature, _, body = rest.partition(":")
        # A forged entry is a miss, never an error: compare_digest refuses non-ASCII text.
        if (text.startswith(_SIGNED) and expires_ms.isdigit() and signature.isascii()
                and hmac.compare_digest(signature, self._sign(key, expires_ms, body))
                and int(expires_ms) >= self._clock() * 1000):
            return body
        self._refused(key)
        return None

    def _refused(self, key: str) -> None:
        # Once per store, not per read: a forger must not be able to flood the log.
        self._refusals += 1
        level = logging.WARNING if self._refusals == 1 else logging.DEBUG
        log.log(level, "cache: an entry under %s fails its signature or has expired and is a miss%s", key[:24],
                " (further ones are logged at DEBUG)" if self._refusals == 1 else "")
