"""The gateway's aiohttp application: the OpenAI- and Anthropic-compatible endpoints over one
``ServiceManager``, behind virtual keys (ADR 0055).

    app = gateway_app(manager, SqliteKeyStore("provmw-keys.sqlite3"), GatewayOptions())

The manager is built once per process and shared by every request; the app never closes it (its
owner, ``provmw.gateway.serve``, does after the in-flight calls finished).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from provmw.gateway import admin, anthropic_wire, openai_media, openai_wire, ui
from provmw.gateway._endpoint import REQUEST_ID, Gateway, GatewayOptions, endpoint
from provmw.gateway._logs import hide_request_bytes
from provmw.gateway.errors import anthropic_error, envelope_errors, openai_error, refusal_of
from provmw.gateway.health import HealthCheck, stack_state
from provmw.gateway.metrics import CONTENT_TYPE

if TYPE_CHECKING:
    from provmw.gateway.keys import KeyStore
    from provmw.manager import ServiceManager

__all__ = ["GATEWAY", "GatewayOptions", "gateway_app"]

log = logging.getLogger("provmw.gateway")
GATEWAY = web.AppKey("provmw_gateway", Gateway)
HEALTH = web.AppKey("provmw_gateway_health", HealthCheck)

# (path, endpoint name for metrics, handler); all on the OpenAI wire, with its error envelope.
OPENAI_ROUTES = (
    ("/v1/chat/completions", "chat_completions", openai_wire.chat_completions),
    ("/v1/completions", "completions", openai_wire.completions),
    ("/v1/embeddings", "embeddings", openai_wire.embeddings),
    ("/v1/responses", "responses", openai_media.responses),
    ("/v1/images/generations", "images", openai_media.images),
    ("/v1/audio/speech", "speech", openai_media.speech),
    ("/v1/moderations", "moderations", openai_media.moderations),
    ("/v1/rerank", "rerank", openai_media.rerank),
)


def gateway_app(manager: ServiceManager, keys: KeyStore, options: GatewayOptions | None = None) -> web.Application:
    """The gateway on ``manager``, its callers verified by ``keys``."""
    options = options if options is not None else GatewayOptions()
    gateway = Gateway(manager, keys, options)
    hide_request_bytes()
    app = web.Application(client_max_size=options.max_body_bytes, handler_args={"max_field_size": 16384},
                          middlewares=[envelope_errors])
    app[GATEWAY] = gateway
    app.on_response_prepare.append(_request_id_header)
    app[HEALTH] = HealthCheck(manager, keys)
    for path, name, handler in OPENAI_ROUTES:
        app.router.add_post(path, endpoint(gateway, name, handler, openai_error))
    app.router.add_post("/v1/audio/transcriptions", endpoint(gateway, "transcriptions", openai_media.transcriptions,
                                                             openai_error, read=openai_media.form_body))
    app.router.add_post("/v1/messages", endpoint(gateway, "messages", anthropic_wire.messages, anthropic_error))
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/health", _live)
    app.router.add_get("/health/ready", _ready)
    app.router.add_get("/metrics", _metrics(ui.admin_token()))
    app.router.add_get("/ui", ui.status_page(gateway))  # 404 unless PROVMW_ADMIN_TOKEN is set
    admin.add_admin_routes(app, keys)  # none unless PROVMW_ADMIN_TOKEN is set
    return app


async def _models(request: web.Request) -> web.StreamResponse:
    gateway = request.app[GATEWAY]
    anthropic = "anthropic-version" in request.headers
    try:
        caller = await gateway.caller(request)
    except Exception as exc:
        return (anthropic_error if anthropic else openai_error)(refusal_of(exc))
    return openai_wire.model_list(gateway.allowed(caller), anthropic)


async def _request_id_header(request: web.Request, response: web.StreamResponse) -> None:
    """An endpoint's answer, refusals and streams included, names its call: ``x-request-id`` (OpenAI's
    header) and ``request-id`` (Anthropic's), which the SDKs show on their answers and errors."""
    given = request.get(REQUEST_ID)
    if given is not None:
        response.headers["x-request-id"] = response.headers["request-id"] = given


async def _live(request: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "live"})


async def _ready(request: web.Request) -> web.StreamResponse:
    """200 ready; 200 degraded while the shared state does not answer (the gateway still serves, under
    the outage rule); 503 while the key store does not answer (``provmw.gateway.health``, ADR 0056)."""
    readiness = await request.app[HEALTH].readiness()
    return web.json_response(readiness.body(), status=readiness.http_status)


def _metrics(expected: bytes | None) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """``GET /metrics``: open (for a scraper on the internal network) unless ``PROVMW_ADMIN_TOKEN`` is set,
    then only for it: the metrics name every key's spend."""
    async def metrics(request: web.Request) -> web.StreamResponse:
        if expected is not None and not ui.is_admin(request, expected):
            return web.Response(status=401, text="/metrics needs 'Authorization: Bearer <admin token>'",
                                headers={"www-authenticate": 'Bearer realm="provmw admin"'})
        gateway = request.app[GATEWAY]
        text = gateway.metrics.render(await stack_state(gateway.manager))
        return web.Response(body=text.encode(), headers={"content-type": CONTENT_TYPE})

    return metrics
