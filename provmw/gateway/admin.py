"""``/admin``: the gateway's virtual keys and their budgets over HTTP, for its operator only.

::

    GET  /admin/keys[?organisation=]      the keys, oldest first: records, no secret, no hash
    POST /admin/keys                      {organisation, team?, user?, models?, guard?, name?}: 201, the key
    GET  /admin/keys/{key_id}             one key's record
    POST /admin/keys/{key_id}/disable     refuse the key from now on
    POST /admin/keys/{key_id}/rotate      201, a new key for the same owner; the old one disabled
    PUT  /admin/budgets                   {scope, subject, period, max_cost_usd?, max_tokens?, max_requests?}:
                                          no maximum removes the period's limit

The same store calls and checks as ``provmw keys`` (a record is its ``--format json`` row). A
whole key leaves only in the 201 of a create or a rotate; the log says which key and what was done
(``admin: key created <key_id> for <organisation>``), never the key.

Guarded as ``/ui`` is: only ``Authorization: Bearer $PROVMW_ADMIN_TOKEN`` (else 401), compared
in constant time. With no token set the routes are not added at all: every ``/admin`` path is a
404, as any unknown path is. A change reaches every server sharing the store, this one included,
within its key cache's TTL (2 s): no restart.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

from provmw.errors import ConfigurationError
from provmw.gateway.errors import SHARED_STATE_RETRY_S, GatewayRefusal, Refusal, openai_error
from provmw.gateway.ui import admin_token, is_admin

if TYPE_CHECKING:
    from provmw.gateway.keys import KeyRecord, KeyStore
    from provmw.middleware.budget import BudgetLimit

__all__ = ["MAX_BODY_BYTES", "add_admin_routes"]

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_BODY_BYTES = 16 * 1024  # a key or a budget is a few hundred bytes
_INT64_MAX = 2**63 - 1  # a larger maximum fits no store's integer column
_CREATE_FIELDS = ("organisation", "team", "user", "models", "guard", "name")
_BUDGET_FIELDS = ("scope", "subject", "period", "max_cost_usd", "max_tokens", "max_requests")
# A whole key is a credential: no cache (a proxy's, a browser's) keeps any answer of this API.
_HEADERS = {"cache-control": "no-store"}
_CHALLENGE = {"www-authenticate": 'Bearer realm="provmw admin"'}

Action = Callable[["KeyStore", web.Request], Awaitable[web.Response]]


def add_admin_routes(app: web.Application, keys: KeyStore, environ: Mapping[str, str] | None = None) -> None:
    """Add the admin API over ``keys`` to ``app`` if ``PROVMW_ADMIN_TOKEN`` (from ``environ``) is set."""
    expected = admin_token(environ)
    if expected is None:
        return  # no admin surface without a token
    for method, path, action in (("GET", "/admin/keys", _list), ("POST", "/admin/keys", _create),
                                 ("GET", "/admin/keys/{key_id}", _get),
                                 ("POST", "/admin/keys/{key_id}/disable", _disable),
                                 ("POST", "/admin/keys/{key_id}/rotate", _rotate),
                                 ("PUT", "/admin/budgets", _budget)):
        app.router.add_route(method, path, _guarded(action, keys, expected))


def _guarded(action: Action, keys: KeyStore, expected: bytes) -> Callable[[web.Request], Awaitable[web.Response]]:
    """``action`` for the admin token only; its refusals in the gateway's OpenAI envelope."""
    async def handle(request: web.Request) -> web.Response:
        if not is_admin(request, expected):
            response = openai_error(Refusal(401, "authentication_error", "the admin API needs 'Authorization: "
                                            "Bearer <admin token>'", "invalid_admin_token"))
            response.headers.update(_CHALLENGE)
            return response
        try:
            return await action(keys, request)
        except GatewayRefusal as exc:
            return openai_error(exc.refusal)
        except ConfigurationError as exc:  # what was asked, refused by the store (a key rotated already)
            return openai_error(Refusal(400, "invalid_request_error", str(exc), "invalid_request"))

    return handle


async def _list(keys: KeyStore, request: web.Request) -> web.Response:
    records = await _stored(keys.list(request.query.get("organisation") or None))
    return _answer({"keys": [record.as_data() for record in records]})


async def _get(keys: KeyStore, request: web.Request) -> web.Response:
    return _answer({"record": (await _existing(keys, request.match_info["key_id"])).as_data()})


async def _create(keys: KeyStore, request: web.Request) -> web.Response:
    body = await _body(request, _CREATE_FIELDS)
    models = [] if body.get("models") is None else body["models"]  # null, as absent: every name
    name = "" if body.get("name") is None else body["name"]
    with _invalid(_CREATE_FIELDS):
        if not isinstance(models, list):
            raise ConfigurationError(f"models: expected a list of configuration, pool or alias names, got {models!r}")
        if not isinstance(name, str):
            raise ConfigurationError(f"name: expected a string, got {name!r}")
        # Text no store can hold (a NUL, a lone surrogate) is refused here: the store's failure would be a 503.
        if not name.isprintable():
            raise ConfigurationError(f"name: expected printable text, got {name[:40]!r}")
        if not all(not isinstance(model, str) or model.isprintable() for model in models):
            raise ConfigurationError(f"models: expected printable names, got {models!r:.80}")
        whole, record = await _stored(keys.create(body.get("organisation", ""), team=body.get("team"), models=models,
                                                  user=body.get("user"), guard=body.get("guard"), name=name))
    log.info("admin: key created %s for %s", record.key_id, record.organisation)
    return _answer({"key": whole, "record": record.as_data()}, status=201)


async def _disable(keys: KeyStore, request: web.Request) -> web.Response:
    key_id = (await _existing(keys, request.match_info["key_id"])).key_id
    record = await _stored(keys.disable(key_id))
    log.info("admin: key disabled %s", key_id)
    return _answer({"record": record.as_data()})


async def _rotate(keys: KeyStore, request: web.Request) -> web.Response:
    key_id = (await _existing(keys, request.match_info["key_id"])).key_id
    whole, record = await _stored(keys.rotate(key_id))  # once: then its successor is the one to rotate
    log.info("admin: key rotated %s to %s", key_id, record.key_id)
    return _answer({"key": whole, "record": record.as_data()}, status=201)


async def _budget(keys: KeyStore, request: web.Request) -> web.Response:
    body = await _body(request, _BUDGET_FIELDS)
    whose: tuple[Any, ...] = tuple(body.get(field) for field in _BUDGET_FIELDS[:3])  # the store judges them
    scope, subject, period = whose
    if scope == "key" and isinstance(subject, str):
        await _existing(keys, subject)
    with _invalid(_BUDGET_FIELDS, default="subject"):  # the store's own messages name a subject by its scope
        maxima = {field: _maximum(body, field) for field in _BUDGET_FIELDS[3:]}
        limit = await _stored(keys.set_budget(scope, subject, period, **maxima))
    log.info("admin: budget %s %s:%s %s", "removed from" if limit is None else "set on", scope, subject, period)
    return _answer({"removed": True} if limit is None else {"limit": _limit(limit)})


def _maximum(body: Mapping[str, Any], field: str) -> Any:
    """A maximum as given (the budget's own validation judges it), but none a store could not hold."""
    value = body.get(field)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _INT64_MAX:
        raise ConfigurationError(f"{field} must be at most {_INT64_MAX}, got {value}")
    return value


def _limit(limit: BudgetLimit) -> dict[str, Any]:
    return {"scope": limit.scope, "subject": limit.match, "period": limit.period,
            "max_cost_usd": limit.max_cost_usd, "max_tokens": limit.max_tokens, "max_requests": limit.max_requests}


async def _existing(keys: KeyStore, key_id: str) -> KeyRecord:
    """``key_id``'s record, or a 404 (keys are never deleted, so it is still there for the next call)."""
    record = await _stored(keys.get(key_id))
    if record is None:
        raise _refusal(404, "not_found_error", "no virtual key with this id", "key_not_found")
    return record


async def _stored(answer: Awaitable[T]) -> T:
    """The store's answer; a store that fails (not a refusal of what was asked) is a 503."""
    try:
        return await answer
    except ConfigurationError:
        raise
    except Exception as exc:
        log.warning("admin: the key store did not answer: %s", type(exc).__name__)
        raise GatewayRefusal(Refusal(503, "service_unavailable", "the gateway's key store is unavailable",
                                     "service_unavailable", retry_after_s=SHARED_STATE_RETRY_S)) from None


@contextlib.contextmanager
def _invalid(fields: tuple[str, ...], default: str | None = None) -> Iterator[None]:
    """A ``ConfigurationError`` inside as a 400 naming the one of ``fields`` it concerns (else ``default``)."""
    try:
        yield
    except ConfigurationError as exc:
        text = str(exc)
        named = _first_named(text, fields)
        if named is None and default is not None:
            named, text = default, f"{default}: {text}"
        raise _refusal(400, "invalid_request_error", text, "invalid_request", named) from None


def _first_named(text: str, fields: tuple[str, ...]) -> str | None:
    """Of ``fields``, the one ``text`` names first (as a word: 'name' is not in 'names')."""
    found = {f: hit.start() for f in fields if (hit := re.search(rf"(?<!\w){re.escape(f)}(?!\w)", text))}
    return min(found, key=found.__getitem__) if found else None


async def _body(request: web.Request, fields: tuple[str, ...]) -> dict[str, Any]:
    """The request's JSON object, holding only ``fields`` (else 400)."""
    try:
        body = json.loads(await _read(request))
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser's stack
        body = None
    if not isinstance(body, dict):
        raise _refusal(400, "invalid_request_error", "the request body must be a JSON object", "invalid_json")
    unknown = [name for name in body if name not in fields]
    if unknown:
        raise _refusal(400, "invalid_request_error", f"unknown field {unknown[0]!r:.60}; the fields are "
                       f"{', '.join(fields)}", "invalid_request", unknown[0][:60])
    return body


async def _read(request: web.Request) -> bytes:
    """The body, refused (413) once it is over ``MAX_BODY_BYTES``, whether it said its length or not."""
    too_large = _refusal(413, "invalid_request_error", f"an admin request's body is at most {MAX_BODY_BYTES} "
                         "bytes", "request_too_large")
    if (request.content_length or 0) > MAX_BODY_BYTES:
        raise too_large
    raw = bytearray()
    async for chunk in request.content.iter_chunked(4096):
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise too_large
    return bytes(raw)


def _answer(data: Mapping[str, Any], status: int = 200) -> web.Response:
    return web.json_response(data, status=status, headers=_HEADERS)


def _refusal(status: int, kind: str, message: str, code: str, param: str | None = None) -> GatewayRefusal:
    return GatewayRefusal(Refusal(status, kind, message, code, param))
