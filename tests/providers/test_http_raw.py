"""HttpClient's seams for signed requests: bytes sent as given, encoded URLs sent as written, raw streams."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from yarl import URL

from provmw.http import HttpClient, HttpStatusError


async def _echo(request: web.Request) -> web.Response:
    if request.headers.get("X-Fail"):
        return web.json_response({"message": "no"}, status=429)
    return web.json_response({"path": request.raw_path, "body": (await request.read()).decode()})


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    app = web.Application()
    app.router.add_post("/{tail:.*}", _echo)
    running = TestServer(app, host="127.0.0.1")
    await running.start_server()
    yield running
    await running.close()


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    client = HttpClient()
    yield client
    await client.aclose()


async def test_bytes_and_an_encoded_url_go_out_exactly(server: TestServer, http: HttpClient) -> None:
    url = URL(f"http://127.0.0.1:{server.port}/model/a%3Ab%2Fc/converse", encoded=True)
    answer = await http.post_json(url, b'{"a": 1.50}', {})
    assert answer == {"path": "/model/a%3Ab%2Fc/converse", "body": '{"a": 1.50}'}


async def test_post_stream_yields_the_raw_answer(server: TestServer, http: HttpClient) -> None:
    chunks = [c async for c in http.post_stream(f"http://127.0.0.1:{server.port}/x", {"k": "v"}, {},
                                                read_timeout_s=5)]
    assert json.loads(b"".join(chunks)) == {"path": "/x", "body": '{"k":"v"}'}


async def test_post_stream_raises_the_status_of_an_error_answer(server: TestServer, http: HttpClient) -> None:
    with pytest.raises(HttpStatusError) as caught:
        async for _ in http.post_stream(f"http://127.0.0.1:{server.port}/x", b"{}", {"X-Fail": "1"},
                                        read_timeout_s=5):
            pass
    assert caught.value.status == 429
