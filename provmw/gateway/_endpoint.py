"""What every gateway endpoint does around its call: the key (through a short-lived cache of
verified records), the per-key concurrency slot, the body, the model allow-list, the error
envelope and the metrics. Endpoint handlers only map a body onto a manager call and back.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
from aiohttp import web

from provmw._base.ids import new_correlation_id
from provmw.context import Principal
from provmw.errors import ConfigurationError
from provmw.gateway.errors import (
    SHARED_STATE_RETRY_S,
    GatewayRefusal,
    Own,
    Refusal,
    guard_policy_unavailable,
    refusal_of,
)
from provmw.gateway.keys import KeyCache, KeyRecord, KeyStore
from provmw.gateway.metrics import Metrics

if TYPE_CHECKING:
    from provmw.manager import ServiceManager
    from provmw.middleware.budget import BudgetLimit
    from provmw.responses import Usage

__all__ = ["REQUEST_ID", "Call", "Caller", "Gateway", "GatewayOptions", "endpoint", "json_body", "request_id"]

log = logging.getLogger("provmw.gateway")
T = TypeVar("T")
# The call's correlation id: in its ledger rows, traces and logs, and sent back as ``x-request-id``.
REQUEST_ID = web.RequestKey("provmw_request_id", str)
_CLIENTS_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_KEY_IN_ID = re.compile(r"pmk_[0-9a-f]{12}_")  # a whole key's head: an id holding one would publish its secret


def request_id(request: web.Request) -> str:
    """The client's ``x-request-id`` when it is a plain token of at most 128 characters (so a client can
    find its own request in the operator's ledger and traces), else a new correlation id. One holding a
    virtual key (a client that sent its key there) is replaced too: the id goes into ledger rows,
    traces and logs, where a key's secret never goes."""
    given = request.headers.get("x-request-id")
    if given is not None and _CLIENTS_ID.fullmatch(given) and not _KEY_IN_ID.search(given):
        return given
    return new_correlation_id()


def positive_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A limit of 0 would turn aiohttp's body limit off or refuse every request; below, every one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{attribute.name} must be a positive integer, got {value!r}")


@attrs.frozen(kw_only=True)
class GatewayOptions:
    """The server's limits: body bytes (413 beyond), concurrent requests per key (429 beyond), how long
    a verified key is trusted before the store is asked again, and the grace given to in-flight calls
    on shutdown."""

    max_body_bytes: int = attrs.field(default=8 * 1024 * 1024, validator=positive_int)
    max_concurrent_per_key: int = attrs.field(default=64, validator=positive_int)
    key_cache_ttl_s: float = 2.0
    key_cache_entries: int = 10_000
    shutdown_grace_s: float = 30.0
    clock: Callable[[], float] = attrs.field(default=time.monotonic, eq=False, repr=False)


@attrs.frozen
class Caller:
    """A verified, enabled key: its record, budgets, and the principal its calls carry (kept while
    the key cache returns the same record and budgets, so a request allocates none)."""

    record: KeyRecord
    budgets: tuple[BudgetLimit, ...]
    principal: Principal


class Gateway:
    """One app's state: the manager (built once), the keys, the per-key counts in flight, the metrics."""

    def __init__(self, manager: ServiceManager, keys: KeyStore, options: GatewayOptions) -> None:
        self.manager, self.keys, self.options = manager, keys, options
        self.cache = KeyCache(keys, ttl_s=options.key_cache_ttl_s, max_entries=options.key_cache_entries,
                              clock=options.clock)
        self._callers: dict[str, Caller] = {}
        self.metrics = Metrics()
        self.in_flight: dict[str, int] = {}
        settings = manager.settings
        self.models: tuple[str, ...] = tuple(dict.fromkeys((*settings.configurations, *settings.aliases)))
        self._known = frozenset(self.models)

    async def caller(self, request: web.Request) -> Caller:
        """The key's caller, or a 401 refusal (nothing else is touched)."""
        presented = _presented_key(request)
        if not presented:
            raise _refusal(401, "authentication_error", "no API key: send 'Authorization: Bearer <key>' or "
                           "'x-api-key: <key>'", "missing_api_key")
        record = await self._store(self.cache.verify(presented))
        if record is None:
            raise _refusal(401, "authentication_error", "invalid API key", "invalid_api_key")
        if record.disabled:
            raise _refusal(401, "authentication_error", f"API key {record.key_id} is disabled", "key_disabled")
        budgets = await self._store(self.cache.budgets_for(record))
        kept = self._callers.get(record.key_id)
        if kept is not None and kept.record is record and kept.budgets is budgets:
            return kept
        if len(self._callers) >= self.options.key_cache_entries:
            self._callers.clear()
        caller = self._callers[record.key_id] = Caller(record, budgets, record.principal(budgets))
        return caller

    async def _store(self, answer: Awaitable[T]) -> T:
        """The key store's answer; one that fails is a 503 like the other shared-state outages."""
        try:
            return await answer
        except Exception as exc:
            log.warning("the key store did not answer: %s: %s", type(exc).__name__, exc)
            raise _refusal(503, "service_unavailable", "the gateway's key store is unavailable",
                           "service_unavailable", retry_after_s=SHARED_STATE_RETRY_S) from None

    def allowed(self, caller: Caller) -> tuple[str, ...]:
        """The model names the caller may use."""
        models = caller.record.models
        return self.models if not models else tuple(m for m in models if m in self._known)

    def check_model(self, caller: Caller, model: object) -> str:
        if not isinstance(model, str) or not model:
            raise _refusal(400, "invalid_request_error", "the body's 'model' must name a model", "invalid_request",
                           "model")
        allowed = caller.record.models
        if model not in self._known or (allowed and model not in allowed):
            raise _refusal(404, "invalid_request_error", f"the model {model!r} does not exist or this key may "
                           "not use it", "model_not_found", "model")
        return model


@attrs.frozen
class Call:
    """One admitted request: its body, model and caller, and the keywords every manager call takes."""

    request: web.Request
    body: Mapping[str, Any]
    model: str
    caller: Caller
    gateway: Gateway

    @property
    def manager(self) -> ServiceManager:
        return self.gateway.manager

    def keywords(self) -> dict[str, Any]:
        """``configuration``, ``user``, ``tenant``, ``principal``, ``correlation_id`` (the request's id)
        and the key's guard policy as ``controls``: all a client decides is the model.

        The user is the key's user within its organisation (``acme/grace``, as its budget bucket names
        it, so two organisations' users of one name never share ledger rows), else the key's id: never
        the body's ``user`` (OpenAI's end-user label),
        which would let a client pick its per-user budget, cache scope and ledger rows (ADR 0055). A
        key naming a guard policy when no installed layer reads ``guard_policy`` (no guard) is refused:
        fail closed, never served unguarded."""
        record = self.caller.record
        keywords = {"configuration": self.model, "user": self.caller.principal.subject("user") or record.key_id,
                    "tenant": record.organisation, "principal": self.caller.principal,
                    "correlation_id": self.request[REQUEST_ID]}
        if record.guard is not None:
            if "guard_policy" not in self.manager.pipeline.controls:
                raise GatewayRefusal(guard_policy_unavailable(record.guard))
            keywords["controls"] = {"guard_policy": record.guard}
        return keywords

    def own(self) -> Own:
        """What a refusal may show this caller: its own buckets and its body's field names."""
        record, principal = self.caller.record, self.caller.principal
        subjects = {"key": record.key_id, "organisation": record.organisation, "tenant": record.organisation,
                    "team": principal.subject("team"), "user": principal.subject("user") or record.key_id}
        buckets = {f"{scope}:{name}" for scope, name in subjects.items() if name}
        return Own(frozenset(buckets), tuple(name for name in self.body if isinstance(name, str)), record.guard)

    def used(self, usage: Usage | None) -> None:
        """Count what the call used for the key's metrics."""
        self.gateway.metrics.add_usage(self.caller.record.key_id, usage)


Handler = Callable[[Call], Awaitable[web.StreamResponse]]
Envelope = Callable[[Refusal], web.Response]
BodyReader = Callable[[web.Request], Awaitable[Mapping[str, Any]]]


def endpoint(gateway: Gateway, name: str, handler: Handler, envelope: Envelope, *,
             read: BodyReader | None = None) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """``handler`` behind the key, the concurrency slot, the body, the model check and the envelope."""
    reader = read if read is not None else json_body
    slots, limit = gateway.in_flight, gateway.options.max_concurrent_per_key

    async def handle(request: web.Request) -> web.StreamResponse:
        started, key_id, call = time.perf_counter(), "-", None
        request[REQUEST_ID] = request_id(request)
        try:
            caller = await gateway.caller(request)
            key_id = caller.record.key_id
            taken = slots.get(key_id, 0)
            if taken >= limit:
                raise _refusal(429, "rate_limit_exceeded", f"key {key_id} has {limit} requests in flight already",
                               "concurrency_limit", retry_after_s=1.0)
            slots[key_id] = taken + 1
            try:
                body = await reader(request)
                call = Call(request, body, gateway.check_model(caller, body.get("model")), caller, gateway)
                response = await handler(call)
            finally:
                slots[key_id] -= 1
        except Exception as exc:  # every failure leaves in the wire's envelope; CancelledError passes
            refusal = refusal_of(exc, call.own()) if call is not None else refusal_of(exc)
            log.info("%s %s: %s %s", name, key_id, refusal.status, refusal.code)
            response = envelope(refusal)
        gateway.metrics.observe(name, response.status, key_id, time.perf_counter() - started)
        return response

    return handle


async def json_body(request: web.Request) -> Mapping[str, Any]:
    """The request's JSON object (aiohttp refuses more than ``client_max_size`` bytes: 413)."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise _refusal(413, "invalid_request_error", f"request body over {request.client_max_size} bytes",
                       "request_too_large") from None
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser's stack
        body = None
    if not isinstance(body, dict):
        raise _refusal(400, "invalid_request_error", "the request body must be a JSON object", "invalid_json")
    return body


def _presented_key(request: web.Request) -> str | None:
    header = request.headers.get("authorization")
    if header is not None and header[:7].lower() == "bearer ":
        return header[7:].strip()
    return request.headers.get("x-api-key")


def _refusal(status: int, kind: str, message: str, code: str, param: str | None = None, *,
             retry_after_s: float | None = None) -> GatewayRefusal:
    return GatewayRefusal(Refusal(status, kind, message, code, param, retry_after_s=retry_after_s))
