"""A loopback OpenAI-compatible server that answers at once, run in a process of its own.

The end-to-end benchmark measures what a client spends per call; a server sharing the
client's process (and its GIL) would blur that, so this one runs apart:
``python -m benchmarks._loopback`` prints its port and serves until stdin closes. Every
chat completion gets the same small answer (``finish_reason = "stop"``, with usage), so
every contender reads the same bytes. A request with ``"stream": true`` gets ``max_tokens``
content chunks (one word each) as server-sent events, then the usage and ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

__all__ = ["ANSWER", "serving"]

ANSWER = json.dumps({
    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "Hello there, how can I help?"}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20},
}).encode()


async def _chat(request: web.Request) -> web.StreamResponse:
    body = json.loads(await request.read())
    if not body.get("stream"):
        return web.Response(body=ANSWER, content_type="application/json")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for _ in range(int(body.get("max_tokens", 1))):
        await response.write(_CHUNK)
    await response.write(_LAST)
    await response.write_eof()
    return response


def _event(data: object) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


_CHUNK = _event({"id": "c", "object": "chat.completion.chunk", "model": "gpt-4o-mini",
                 "choices": [{"index": 0, "delta": {"content": "word "}, "finish_reason": None}]})
_LAST = _event({"id": "c", "object": "chat.completion.chunk", "model": "gpt-4o-mini",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}) + _event(
    {"id": "c", "object": "chat.completion.chunk", "model": "gpt-4o-mini", "choices": [],
     "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20}}) + b"data: [DONE]\n\n"


async def _serve() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent goes
    await runner.cleanup()


@contextmanager
def serving() -> Iterator[str]:
    """Start the server in a child process; yield its OpenAI base URL (``http://127.0.0.1:N/v1``)."""
    child = subprocess.Popen([sys.executable, "-m", "benchmarks._loopback"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        yield f"http://127.0.0.1:{int(child.stdout.readline())}/v1"
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)


if __name__ == "__main__":
    asyncio.run(_serve())
