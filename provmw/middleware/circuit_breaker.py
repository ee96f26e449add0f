"""``circuit_breaker``: stop calling an endpoint that keeps failing, then probe it."""

from __future__ import annotations

import asyncio
import logging

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import CircuitOpenError, disposition
from provmw.middleware._common import Clock, endpoint_key, monotonic
from provmw.pipeline import Next, R
from provmw.stores.breakers import BreakerPolicy, BreakerState, BreakerStore, MemoryBreakerStore, Transition
from provmw.streams import OpenedStream, StreamEnd

__all__ = ["CircuitBreakerMiddleware"]

log = logging.getLogger(__name__)


class CircuitBreakerMiddleware:
    """One breaker per provider + base URL + model + account; open raises ``CircuitOpenError`` at once.

    Errors that say the endpoint is unwell (rate limits, timeouts, 5xx, connection
    failures, bad bodies) count as failures; errors about the account (a rejected key, an
    exhausted quota) or the request say nothing about the endpoint's health, so they, like
    a cancelled call, give their permit back uncounted.
    """

    name = "circuit_breaker"
    priority = 400

    def __init__(self, policy: BreakerPolicy | None = None, *, store: BreakerStore | None = None,
                 clock: Clock = monotonic) -> None:
        self.policy = policy or BreakerPolicy()
        self.store: BreakerStore = store if store is not None else MemoryBreakerStore()
        self._clock = clock
        self._keys: dict[tuple[str, str | None, str, str], str] = {}

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        key, store, policy, clock = self._key(config), self.store, self.policy, self._clock
        admission = await store.admit(key, policy, clock())
        _log(admission.transition)
        if not admission.admitted:
            await asyncio.sleep(0)  # a caller retrying at once must still let the loop run
            raise CircuitOpenError(key, admission.retry_after_s)
        started = clock()
        try:
            response = await next(config)
        except Exception as exc:
            if disposition(exc).endpoint_failed:
                _log(await store.record(key, admission, policy, failed=True, slow=False, now=clock()))
            else:
                await store.release(key, admission)
            raise
        except asyncio.CancelledError:
            await store.release(key, admission)
            raise
        now = clock()
        slow = policy.slow_call_s is not None and now - started >= policy.slow_call_s
        if isinstance(response, OpenedStream):  # the outcome is known at the end: a stream may fail midway
            async def record_end(end: StreamEnd) -> None:
                failed = end.error is not None and disposition(end.error).endpoint_failed
                _log(await store.record(key, admission, policy, failed=failed, slow=slow, now=clock()))

            response.on_end(record_end)
            return response
        _log(await store.record(key, admission, policy, failed=False, slow=slow, now=now))
        return response

    def _key(self, config: ProviderConfig) -> str:
        # Parsing the URL costs more than the rest of the happy path; remember the answer.
        where = (config.provider, config.base_url, config.model, config.credential_fingerprint)
        key = self._keys.get(where)
        if key is None:
            if len(self._keys) >= 4096:  # ad-hoc configurations could otherwise grow it forever
                self._keys.clear()
            key = self._keys[where] = endpoint_key(config)
        return key


def _log(transition: Transition | None) -> None:
    if transition is None:
        return
    level = logging.WARNING if transition.after is BreakerState.OPEN else logging.INFO
    log.log(level, "circuit %s: %s -> %s", transition.key, transition.before.value, transition.after.value)
