"""The demo's gateway step: the same manager behind `provmw serve`'s app on loopback, a virtual key
with a budget of three requests, and the official OpenAI SDK (when installed) as a client in
another language would be: answered twice, then refused with a 429 that names the key's bucket.
"""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from provmw.gateway import SqliteKeyStore, gateway_app

if TYPE_CHECKING:
    from provmw.cli.demo import _Story

__all__ = ["tell_gateway"]

async def tell_gateway(story: _Story) -> None:
    """Two answers and a refusal through the gateway, with the SDK when it is installed."""
    with tempfile.TemporaryDirectory(prefix="provmw-demo-keys-") as folder:
        keys = SqliteKeyStore(Path(folder) / "keys.sqlite3")
        runner = web.AppRunner(gateway_app(story.manager, keys), access_log=None)
        try:
            whole, record = await keys.create("acme", team="search", user="grace", models=("primary",))
            await keys.set_budget("key", record.key_id, "total", max_requests=2)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            port = runner.addresses[0][1]
            story.say(f"   key {record.key_id} for acme/search (its secret shown once, only its hash kept), "
                      "budget: 2 requests")
            url = f"http://127.0.0.1:{port}/v1"
            for question in ("Hello through the gateway", "And again", "Once more"):
                await _ask(story, url, whole, question)
        finally:
            await runner.cleanup()
            await keys.aclose()


async def _ask(story: _Story, url: str, key: str, question: str) -> None:
    if importlib.util.find_spec("openai") is None:
        return await _ask_plainly(story, url, key, question)
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0)
    try:
        answer = await client.chat.completions.create(model="primary", messages=[{"role": "user",
                                                                                 "content": question}])
        story.say(f"   openai SDK -> {answer.choices[0].message.content!r}  [tokens={answer.usage.total_tokens}]"
                  if answer.usage else f"   openai SDK -> {answer.choices[0].message.content!r}")
    except openai.APIStatusError as exc:
        story.say(f"   openai SDK -> {type(exc).__name__} {exc.status_code}: {_message(exc.body)}")
    finally:
        await client.close()


async def _ask_plainly(story: _Story, url: str, key: str, question: str) -> None:
    import aiohttp

    body = {"model": "primary", "messages": [{"role": "user", "content": question}]}
    async with aiohttp.ClientSession() as session, session.post(
            f"{url}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}) as response:
        data = await response.json()
    shown = data["choices"][0]["message"]["content"] if response.status == 200 else _message(data)
    story.say(f"   HTTP {response.status} -> {shown!r}  (install the openai SDK to see it as a client)")


def _message(body: Any) -> str:
    error = body.get("error", body) if isinstance(body, dict) else body
    return str(error.get("message", error) if isinstance(error, dict) else error)
