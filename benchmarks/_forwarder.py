"""The floor under the gateway's added latency: an aiohttp server that forwards each chat completion's
bytes to the upstream with one aiohttp client and hands the answer back, checking and mapping nothing.

``python -m benchmarks._forwarder UPSTREAM_URL`` prints ``listening on URL`` and serves until terminated.
"""

from __future__ import annotations

import asyncio
import sys

import aiohttp
from aiohttp import web

__all__ = ["main"]

SESSION = web.AppKey("session", aiohttp.ClientSession)
UPSTREAM = web.AppKey("upstream", str)


async def _forward(request: web.Request) -> web.Response:
    body = await request.read()
    async with request.app[SESSION].post(request.app[UPSTREAM], data=body,
                                         headers={"content-type": "application/json"}) as answer:
        return web.Response(body=await answer.read(), status=answer.status, content_type="application/json")


async def _serve(upstream: str) -> None:
    app = web.Application()
    app[SESSION], app[UPSTREAM] = aiohttp.ClientSession(), f"{upstream}/v1/chat/completions"
    app.router.add_post("/v1/chat/completions", _forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    print(f"listening on http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    asyncio.run(_serve(sys.argv[1]))


if __name__ == "__main__":
    main()
