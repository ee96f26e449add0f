"""A server that echoes what a call to a deployment carried (an Entra ID token, the ``api-key``)
gets none of it into the error a caller sees, its attributes (``code``) or the errors it chains,
even when the Azure transport cuts and re-wraps the body that held it (issue 33 item 13)."""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import AsyncIterator, Iterable

import pytest
from aiohttp import web
from provmw_azure import AzureOpenAIAdapter

import provmw
from provmw.config import ProviderConfig
from provmw.errors import ProviderError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import Settings

TOKEN = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.entra-token-never-shown"
API_KEY = "azure-api-key-5f0e9c1d-never-shown"


async def _echo(request: web.Request) -> web.StreamResponse:
    token = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if "/deployments/cut/" in request.path:  # a gateway page quoting the key where the transport cuts it
        return web.Response(status=404, text="x" * 190 + request.headers.get("api-key", ""))
    error = {"error": {"code": token, "message": f"invalid token {token}"}}
    if (await request.json()).get("stream"):
        return web.Response(text=f"data: {json.dumps(error)}\n\n", content_type="text/event-stream")
    return web.json_response(error, status=401, headers={"x-echo": token})


@pytest.fixture
async def echoing() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/{tail:.*}", _echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


class _EntraAzure:
    @provmw.hookimpl
    def provmw_providers(self) -> Iterable[AzureOpenAIAdapter]:
        async def token() -> tuple[str, float]:
            return TOKEN, time.time() + 3600

        return (AzureOpenAIAdapter(token_provider=token),)


def everything(exc: BaseException) -> str:
    """What the error and each error it chains show: text, traceback and attributes."""
    shown, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        shown += ["".join(traceback.format_exception(current)), repr(current.args), repr(vars(current))]
        current = current.__cause__ or current.__context__
    return "\n".join(shown)


async def failure(url: str, *, model: str = "gpt-4o-prod", api_key: str | None = None,
                  stream: bool = False) -> ProviderError:
    config = ProviderConfig(identifier="az", provider="azure", model=model, base_url=url, api_key=api_key)
    host = PluginHost(PluginPolicy(autoload=False), environ={})
    host.register(_EntraAzure(), "azure")
    async with ServiceManager(Settings(configurations={"az": config}), host=host) as manager:
        with pytest.raises(ProviderError) as caught:
            await (anext(manager.stream_chat("hi")) if stream else manager.chat("hi"))
    return caught.value


async def test_an_entra_token_echoed_as_the_error_code_is_masked(echoing: str) -> None:
    error = await failure(echoing)
    assert (error.code, str(error)) == ("***", "azure/gpt-4o-prod (HTTP 401): invalid token ***")
    assert TOKEN not in everything(error)


async def test_an_entra_token_echoed_in_a_stream_error_event_is_masked(echoing: str) -> None:
    error = await failure(echoing, stream=True)
    assert error.code == "***"
    assert TOKEN not in everything(error)


async def test_a_key_cut_where_the_transport_re_wraps_the_body_leaves_no_prefix(echoing: str) -> None:
    error = await failure(echoing, model="cut", api_key=API_KEY)
    assert error.status == 404
    assert API_KEY[:8] not in everything(error)
