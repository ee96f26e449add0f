"""What the gateway says about itself: readiness (``GET /health/ready``) and the stack's state that
``GET /metrics`` shows beside its counters (each endpoint's breaker, each pool deployment's load).

Readiness has three answers (ADR 0056)::

    200 {"status": "ready", "degraded": []}            the key store and the shared state answer
    200 {"status": "degraded", "degraded": [...]}      the shared state (Redis) or a networked ledger does
        not answer: calls go on under the outage rule (ADR 0013), so the gateway stays in rotation;
        ``meaning`` says what each degraded concern does meanwhile
    503 {"status": "not_ready", "keys": "<error>"}     the key store does not answer: no request can be
        verified, so this gateway cannot serve and a load balancer should send its traffic elsewhere

The shared state is asked through its own backend (one read of an absent cache key), so during an
outage the backend's health answers without touching the network until its retry is due. One check
runs at a time, each part bounded by a short timeout, and its answer is kept ``ttl_s`` (1 s): a load
balancer polling often costs one key-store read and one shared-state read a second, and no request
ever waits for a check.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

from provmw.errors import ConfigurationError
from provmw.middleware import BUDGET, section_options
from provmw.middleware._common import endpoint_key
from provmw.middleware.circuit_breaker import CircuitBreakerMiddleware
from provmw.middleware.pool import PoolMiddleware
from provmw.pools import POOL_PROVIDER
from provmw.stores.breakers import BreakerState
from provmw.stores.outage import GuardedBreakers

if TYPE_CHECKING:
    from provmw.gateway.keys import KeyStore
    from provmw.manager import ServiceManager
    from provmw.stores.breakers import BreakerStore
    from provmw.stores.cache import CacheStore

__all__ = ["BreakerGauge", "HealthCheck", "PoolGauge", "Readiness", "StackState", "stack_state"]

log = logging.getLogger("provmw.gateway")

_PROBE_KEY = "provmw:gateway:readiness-probe"  # never written: reading it is one round trip
_ABSENT_KEY_ID = "0" * 12
# What each concern does while its shared store does not answer (provmw.stores.outage).
_MEANING = {
    "cache": "every call is a miss and goes to the provider",
    "idempotency": "repeated idempotency keys are not recognised",
    "circuit_breaker": "this process's breakers decide",
    "rate_limit": "this process's rate limits decide",
    "pool": "this process's view of the pools decides",
    "usage": "records spill to the local file and are replayed when the ledger answers",
}
_BUDGET_MEANING = {
    "fail_closed": "calls with a budget are refused (503, retry-after) before any request",
    "fail_open": "calls go uncounted",
}

Status = Literal["ready", "degraded", "not_ready"]


@attrs.frozen
class Readiness:
    """One readiness check's answer."""

    status: Status
    degraded: tuple[str, ...] = ()
    detail: Mapping[str, str] = attrs.field(factory=dict)
    meaning: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def http_status(self) -> int:
        return 503 if self.status == "not_ready" else 200

    def body(self) -> dict[str, Any]:
        """The JSON the endpoint answers."""
        body: dict[str, Any] = {"status": self.status, "degraded": list(self.degraded)}
        body.update(self.detail)
        if self.meaning:
            body["meaning"] = dict(self.meaning)
        return body


class HealthCheck:
    """Readiness of one gateway: its key store must answer; its shared state may not (degraded)."""

    def __init__(self, manager: ServiceManager, keys: KeyStore, *, ttl_s: float = 1.0, keys_timeout_s: float = 2.0,
                 state_timeout_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.manager, self.keys = manager, keys
        self._ttl_s, self._keys_timeout_s, self._state_timeout_s = ttl_s, keys_timeout_s, state_timeout_s
        self._clock = clock
        self._last: Readiness | None = None
        self._checked_at = 0.0
        self._running: asyncio.Task[Readiness] | None = None
        self._probe: CacheStore | None = None

    async def readiness(self) -> Readiness:
        """The last answer if younger than ``ttl_s``, else a new one (shared by concurrent askers)."""
        if self._last is not None and self._clock() - self._checked_at < self._ttl_s:
            return self._last
        if self._running is None:
            self._running = asyncio.ensure_future(self._check())
        # Shielded: a prober that hangs up must not cancel the check the others wait for.
        return await asyncio.shield(self._running)

    async def _check(self) -> Readiness:
        try:
            keys_error, state_error = await asyncio.gather(self._keys_error(), self._state_error())
            answer = self._answer(keys_error, state_error)
            self._last, self._checked_at = answer, self._clock()
            return answer
        finally:
            self._running = None

    def _answer(self, keys_error: str | None, state_error: str | None) -> Readiness:
        if keys_error is not None:
            log.warning("readiness: the key store did not answer: %s", keys_error)
            return Readiness("not_ready", detail={"keys": keys_error})
        state = self.manager.state
        degraded, detail = [], {}
        if state_error is not None:
            degraded += sorted(state.shared_concerns)
            detail["shared_state"] = f"{self._shown_url()} did not answer ({state_error})"
        if state.ledger is not None and state.usage_journal().failing:
            degraded.append("usage")
            detail["ledger"] = "the ledger did not answer; its records are kept in the spill file"
        if not degraded:
            return Readiness("ready")
        return Readiness("degraded", tuple(degraded), detail, {c: self._meaning(c) for c in degraded})

    async def _keys_error(self) -> str | None:
        try:
            await asyncio.wait_for(self.keys.get(_ABSENT_KEY_ID), self._keys_timeout_s)
        except Exception as exc:
            return type(exc).__name__
        return None

    async def _state_error(self) -> str | None:
        shared = self.manager.state.shared
        if shared is None:
            return None
        try:
            if self._probe is None:
                self._probe = shared.cache_store()
            await asyncio.wait_for(self._probe.get(_PROBE_KEY), self._state_timeout_s)
        except Exception as exc:
            return type(exc).__name__
        return None

    def _shown_url(self) -> str:
        state = self.manager.settings.state
        return state.shown_url if state is not None else "the shared state"

    def _meaning(self, concern: str) -> str:
        if concern == "budget":
            return _BUDGET_MEANING[section_options(self.manager.settings, BUDGET).failure_policy]
        return _MEANING.get(concern, "served under the outage rule")


@attrs.frozen
class BreakerGauge:
    """An endpoint's breaker, named by the configuration that calls it."""

    configuration: str
    state: BreakerState


@attrs.frozen
class PoolGauge:
    """A pool deployment's load as the pool's state holds it."""

    pool: str
    deployment: str
    in_flight: int
    cooldown_s: float  # left to wait; 0 when it is not cooling down


@attrs.frozen
class StackState:
    """What ``/metrics`` shows of the stack besides its counters."""

    breakers: tuple[BreakerGauge, ...] = ()
    pools: tuple[PoolGauge, ...] = ()


async def stack_state(manager: ServiceManager, *, timeout_s: float = 1.0) -> StackState:
    """Each configuration's breaker and each pool deployment's load; what could not be read in
    ``timeout_s`` is left out (a scrape must not hang on a store)."""
    try:
        breakers, pools = await asyncio.wait_for(
            asyncio.gather(_breakers(manager), _pools(manager)), timeout_s)
    except (TimeoutError, ConnectionError) as exc:
        log.info("metrics: the stack's state could not be read (%s)", type(exc).__name__)
        return StackState()
    return StackState(breakers, pools)


async def _breakers(manager: ServiceManager) -> tuple[BreakerGauge, ...]:
    layer = next((m for m in manager.pipeline.middlewares if isinstance(m, CircuitBreakerMiddleware)), None)
    if layer is None:
        return ()
    keys = {}
    for name, config in manager.settings.configurations.items():
        if config.provider == POOL_PROVIDER:
            continue
        try:  # the key the breaker keeps: by the credentials a call reads
            keys[name] = endpoint_key(manager.settings.with_credentials(config))
        except ConfigurationError:
            continue  # its key variable is not set: no call has reached its breaker
    states = await asyncio.gather(*(_breaker_state(layer.store, key) for key in keys.values()))
    return tuple(BreakerGauge(name, state) for name, state in zip(keys, states, strict=True) if state is not None)


async def _breaker_state(store: BreakerStore, key: str) -> BreakerState | None:
    """The breaker's state where its store can say it; a shared store that does not answer is
    stood in for by this process's, as the outage rule does for the calls."""
    if isinstance(store, GuardedBreakers):
        try:
            return await _breaker_state(store.shared, key)
        except (ConnectionError, TimeoutError):
            return await _breaker_state(store.local, key)
    read = getattr(store, "state", None)
    if read is None:
        return None
    state = read(key)
    return await state if inspect.isawaitable(state) else state  # type: ignore[no-any-return]


async def _pools(manager: ServiceManager) -> tuple[PoolGauge, ...]:
    layer = next((m for m in manager.pipeline.middlewares if isinstance(m, PoolMiddleware)), None)
    if layer is None:
        return ()
    now, gauges = time.time(), []
    for pool in manager.settings.pools.values():
        view = await layer.state.read(pool.name, pool.members, None, now)
        for member in pool.members:
            load = view.loads.get(member)
            if load is not None:
                gauges.append(PoolGauge(pool.name, member, load.in_flight, max(0.0, load.cooldown_until - now)))
    return tuple(gauges)
