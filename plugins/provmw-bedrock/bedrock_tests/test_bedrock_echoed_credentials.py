"""A server that echoes a signed request's credentials (the access key id of ``Credential=``, the
session token of ``X-Amz-Security-Token``) in its error body or headers gets none of them into
the error a caller sees, nor into the errors it chains (issue 33 item 13)."""

from __future__ import annotations

import traceback
from collections.abc import AsyncIterator

import provmw_bedrock
import pytest
from aiohttp import web
from provmw_bedrock.adapter import EVENT_STREAM
from provmw_bedrock.fake import BedrockWire

from bedrock_tests.conftest import ACCESS_KEY, SECRET_KEY
from provmw.errors import AuthenticationError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import parse_settings

SESSION_TOKEN = "IQoJb3JpZ2luX2VjEPROVMW-session-token-never-shown"
CREDENTIALS = (ACCESS_KEY, SECRET_KEY, SESSION_TOKEN)


def _sent(request: web.Request) -> str:
    return (f"Authorization: {request.headers.get('Authorization')} "
            f"X-Amz-Security-Token: {request.headers.get('X-Amz-Security-Token')}")


async def _echo(request: web.Request) -> web.Response:
    """AWS's error shape, quoting the request's credentials in the message and in headers."""
    return web.json_response({"message": f"denied: {_sent(request)}"}, status=403,
                             headers={"x-amzn-errortype": "AccessDeniedException", "x-echo": _sent(request)})


async def _echo_in_stream(request: web.Request) -> web.Response:
    """A stream whose first message is an exception quoting the request's credentials."""
    frame = BedrockWire().error_frame("converse_stream", "AccessDeniedException", f"denied: {_sent(request)}")
    return web.Response(body=frame, content_type=EVENT_STREAM)


@pytest.fixture
async def echoing(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """The URL of a loopback Bedrock that echoes credentials; botocore's chain has a session token."""
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
    app = web.Application()
    app.router.add_post("/model/{model}/converse", _echo)
    app.router.add_post("/model/{model}/converse-stream", _echo_in_stream)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


def everything(exc: BaseException) -> str:
    """What the error and each error it chains show: text, traceback and attributes."""
    shown, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        shown += ["".join(traceback.format_exception(current)), repr(current.args), repr(vars(current))]
        current = current.__cause__ or current.__context__
    return "\n".join(shown)


async def refused(url: str, *, stream: bool = False) -> BaseException:
    document = {"configurations": {"b": {"provider": "bedrock", "model": "m.v1", "base_url": url}}}
    host = PluginHost(PluginPolicy(autoload=False), environ={})
    host.register(provmw_bedrock, "bedrock")
    async with ServiceManager(parse_settings(document, "provmw.toml", {}), host=host) as manager:
        with pytest.raises(AuthenticationError) as caught:
            await (anext(manager.stream_chat("hi")) if stream else manager.chat("hi"))
    return caught.value


async def test_a_signed_request_echoed_in_an_error_shows_no_credential(echoing: str) -> None:
    error = await refused(echoing)
    assert "Credential=***/" in str(error) and "X-Amz-Security-Token: ***" in str(error)
    assert not [c for c in CREDENTIALS if c in everything(error)]


async def test_a_stream_exception_echoing_the_credentials_shows_none(echoing: str) -> None:
    error = await refused(echoing, stream=True)
    assert not [c for c in CREDENTIALS if c in everything(error)]
