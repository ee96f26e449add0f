"""The Redis state backend: one client, the options of ``[state]``, and what happens when Redis is down.

When Redis cannot be reached (refused, timed out, paused) the backend marks it down for
``retry_s``, logs one warning for the outage, and every store raises
``RedisUnavailableError``. What that means for each concern is the core's outage rule
(``provmw.stores.outage``, ADR 0013): the cache answers misses, breakers, rate limits and
pools use this process's own state, budgets fail as their ``failure_policy`` says (closed by
default: refused before any request).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from provmw.config import Secret
from provmw.errors import ConfigurationError, ProvmwError
from provmw.options import number
from provmw.settings import options_from

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

    from provmw.stores.shared import StateSettings
    from provmw_redis.breakers import RedisBreakerStore
    from provmw_redis.budgets import RedisBudgetStore
    from provmw_redis.cache import RedisCacheStore
    from provmw_redis.pools import RedisPoolState
    from provmw_redis.rate_limits import RedisRateLimiter

__all__ = ["SIGNING_KEY_ENV", "Health", "RedisOptions", "RedisState", "RedisUnavailableError", "lua_limits",
           "milliseconds"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# What "Redis is down" looks like; any other Redis error is a bug worth raising.
UNREACHABLE: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError, TimeoutError)

_PREFIX = re.compile(r"[A-Za-z0-9_.:-]+")

SIGNING_KEY_ENV = "PROVMW_CACHE_SIGNING_KEY"  # where the cache's signing key is read unless signing_key_env says
_MIN_KEY_CHARS = 16
# The concerns whose entries are answers served to callers: what a writer to Redis could forge.
_SIGNED_CONCERNS = frozenset({"cache", "idempotency"})


def _prefix(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not _PREFIX.fullmatch(value):
        raise ConfigurationError(f"key_prefix: {value!r} may hold only letters, digits and _ . : -")


class RedisUnavailableError(ProvmwError, ConnectionError):
    """Redis could not be reached (refused, timed out, paused), or was lately and is skipped."""


@attrs.frozen(kw_only=True)
class RedisOptions:
    """The backend's own keys in ``[state]``."""

    key_prefix: str = attrs.field(default="provmw", validator=_prefix)
    timeout_s: float = attrs.field(default=0.5, validator=number(gt=0))
    retry_s: float = attrs.field(default=1.0, validator=number(ge=0))
    signing_key_env: str | None = None
    unsigned_cache: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    slot_lease_s: float = attrs.field(default=300.0, validator=number(gt=0))
    probe_lease_s: float = attrs.field(default=120.0, validator=number(gt=0))
    max_connections: int = attrs.field(default=50, validator=number(ge=1, integer=True))


class Health:
    """Whether Redis answered lately. After a failure callers skip it for ``retry_s``; then one
    call at a time tries it (the probe) while the others are still refused, so a paused or dead
    server costs one timeout, not one per call. The probe is whichever call comes when it is
    due: no timer of its own, nothing that needs a quiet loop. The outage is logged once."""

    def __init__(self, retry_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._retry_s, self._clock = retry_s, clock
        self._down_until = 0.0
        self._outage = False
        self._probing = False

    def admits(self) -> bool:
        """Whether a call may go to Redis now (during an outage, it becomes the probe)."""
        if not self._outage:
            return True
        if self._probing or self._clock() < self._down_until:
            return False
        self._probing = True
        return True

    def failed(self, exc: BaseException) -> None:
        self._down_until = self._clock() + self._retry_s
        self._probing = False
        if not self._outage:
            log.warning("redis state unreachable (%s: %s): the cache serves misses, breakers, rate limits and "
                        "pools use this process's state, budgets follow their failure_policy", type(exc).__name__, exc)
        self._outage = True

    @property
    def outage(self) -> bool:
        """Whether Redis is taken to be down (since a failure, until a call succeeds)."""
        return self._outage

    def ok(self) -> None:
        if self._outage:
            log.warning("redis state reachable again")
        self._outage = self._probing = False

    def ended(self) -> None:
        """A call ended without saying whether Redis is reachable (cancelled, or another error):
        the next call may probe."""
        self._probing = False


class RedisState:
    """The shared stores over one Redis client, created on first use in the running loop."""

    def __init__(self, state: StateSettings, source: str = "<settings>") -> None:
        where = f"{source}: [state]"
        self.options = o = options_from(RedisOptions, state.options, where)
        self.shown_url = state.shown_url  # its password masked
        self.signing_key = _signing_key(o, _SIGNED_CONCERNS & set(state.shared), where)
        # No client-side retries: a paused server must cost one timeout, and the stores decide
        # what a failure means (the budget fails closed before anything is sent). Past
        # max_connections, commands queue for a connection rather than fail.
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            state.url, max_connections=o.max_connections, timeout=None, socket_timeout=o.timeout_s,
            socket_connect_timeout=o.timeout_s, retry=Retry(NoBackoff(), 0))
        self.client: redis.asyncio.Redis = redis.asyncio.Redis.from_pool(pool)
        self.health = Health(o.retry_s)
        self._scripts: dict[str, AsyncScript] = {}

    async def run(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call`` against Redis; ``RedisUnavailableError`` when Redis fails or is marked down."""
        if not self.health.admits():
            raise RedisUnavailableError(f"redis state unreachable lately; next try within {self.options.retry_s:g}s")
        try:
            result = await call()
        except UNREACHABLE as exc:
            starting = not self.health.outage
            self.health.failed(exc)
            if starting:  # the pool's idle connections died with the server: each would fail once after it is back
                with contextlib.suppress(Exception):
                    await self.client.connection_pool.disconnect(inuse_connections=False)
            raise RedisUnavailableError(f"redis state unreachable: {type(exc).__name__}: {exc}") from exc
        except BaseException:
            self.health.ended()
            raise
        self.health.ok()
        return result

    async def budget_problems(self) -> list[str]:
        """What ``provmw check`` reports for a budget kept here: a server that would forget its spend
        (no persistence, or a policy that evicts keys), or one that cannot be reached."""
        from provmw_redis.durability import forgets_spend

        try:
            problem = await forgets_spend(self)
        except RedisUnavailableError as exc:
            return [f"redis state {self.shown_url}: budgets are kept there and it cannot be reached ({exc})"]
        return [] if problem is None else [problem]

    def script(self, name: str, *, common: str | None = None) -> AsyncScript:
        """A Lua script of this package, registered once (EVALSHA, EVAL after a server restart)."""
        found = self._scripts.get(name)
        if found is None:
            text = _lua(name) if common is None else _lua(common) + "\n" + _lua(name)
            found = self._scripts[name] = self.client.register_script(text)
        return found

    def cache_store(self) -> RedisCacheStore:
        from provmw_redis.cache import RedisCacheStore

        return RedisCacheStore(self)

    def budget_store(self) -> RedisBudgetStore:
        from provmw_redis.budgets import RedisBudgetStore

        return RedisBudgetStore(self)

    def breaker_store(self) -> RedisBreakerStore:
        from provmw_redis.breakers import RedisBreakerStore

        return RedisBreakerStore(self)

    def rate_limiter(self) -> RedisRateLimiter:
        from provmw_redis.rate_limits import RedisRateLimiter

        return RedisRateLimiter(self)

    def pool_state(self) -> RedisPoolState:
        from provmw_redis.pools import RedisPoolState

        return RedisPoolState(self)

    async def aclose(self) -> None:
        await self.client.aclose()


def lua_limits(values: Iterable[int | None]) -> list[int]:
    """Limits as the Lua scripts take them: -1 where there is none."""
    return [-1 if value is None else value for value in values]


def milliseconds(seconds: float) -> int:
    """A duration for PX and PEXPIRE: whole milliseconds, at least one."""
    return max(1, round(seconds * 1000))


def _lua(name: str) -> str:
    return resources.files("provmw_redis").joinpath("scripts", f"{name}.lua").read_text(encoding="utf-8")


def _signing_key(options: RedisOptions, signed: Collection[str], where: str) -> Secret | None:
    """The key that signs cache entries; None only where nothing shared needs one or the settings
    opt out with ``unsigned_cache = true`` (logged: anyone who can write to Redis can then forge answers)."""
    variable = options.signing_key_env or SIGNING_KEY_ENV
    if value := os.environ.get(variable, ""):
        if len(value) < _MIN_KEY_CHARS:
            raise ConfigurationError(f"{where} signing key in {variable} is {len(value)} characters; use at least "
                                     f"{_MIN_KEY_CHARS} random ones (e.g. the output of `openssl rand -hex 32`)")
        return Secret(value)
    if options.signing_key_env is not None:
        raise ConfigurationError(f"{where} signing_key_env: environment variable {variable} is not set")
    if not signed:
        return None
    if options.unsigned_cache:
        log.warning("%s unsigned_cache = true: shared %s entries are not signed, so anyone who can write to this "
                    "Redis can serve forged answers", where, " and ".join(sorted(signed)))
        return None
    raise ConfigurationError(
        f"{where}: sharing the {' and '.join(sorted(signed))} needs a signing key, and environment variable "
        f"{SIGNING_KEY_ENV} is not set. Set it to the same random secret on every host (e.g. `export "
        f"{SIGNING_KEY_ENV}=$(openssl rand -hex 32)`), or leave cache and idempotency out of [state] shared, "
        "or accept forgeable entries with [state] unsigned_cache = true")
