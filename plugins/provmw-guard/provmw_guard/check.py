"""The external check: a moderation endpoint or a judging model, asked over HTTP with a time limit.

The guard never calls the ServiceManager from inside the stack (it would re-enter the pipeline):
the check is its own small client, an ``aiohttp`` session the middleware owns and closes. Its
verdict is ``None`` (allowed) or a rule name; a check that cannot answer (down, slower than its
limit, an error status, an answer that does not parse) gives a rule name too, so the caller
fails closed unless the guard only monitors.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from provmw_guard.options import CheckOptions

if TYPE_CHECKING:  # aiohttp is imported when the check first runs: a manager that sends nothing never loads it
    import aiohttp

__all__ = ["Check", "ExternalCheck", "JUDGE_PROMPT"]

log = logging.getLogger("provmw.guard")

Check = Callable[[str], Awaitable[str | None]]

JUDGE_PROMPT = ("You review text sent to or received from an AI model for an automated policy check. "
                "Answer with exactly one word: ALLOW if the text is acceptable, DENY if it is not.")


class _Unusable(Exception):
    """The check's answer could not be read as a verdict."""


class ExternalCheck:
    """``await check(text)``: None when the endpoint allows ``text``, else the rule that refuses it."""

    def __init__(self, options: CheckOptions, environ: Mapping[str, str] | None = None) -> None:
        self.options = options
        self._environ = os.environ if environ is None else environ
        self._session: aiohttp.ClientSession | None = None
        self._path = "/moderations" if options.kind == "moderation" else "/chat/completions"

    async def __call__(self, text: str) -> str | None:
        import aiohttp

        try:
            async with asyncio.timeout(self.options.timeout_s):
                return await self._ask(text)
        except TimeoutError:
            return "check:timeout"
        except (aiohttp.ClientError, OSError):
            return "check:unavailable"
        except (_Unusable, ValueError):
            return "check:invalid_answer"

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _ask(self, text: str) -> str | None:
        headers = self._headers()
        if headers is None:
            return "check:unavailable"
        if self._session is None or self._session.closed:
            import aiohttp

            self._session = aiohttp.ClientSession()
        url = self.options.base_url.rstrip("/") + self._path
        async with self._session.post(url, json=self._body(text), headers=headers) as response:
            if response.status != 200:
                return "check:unavailable"
            answer = await response.json(content_type=None)
        return _moderation(answer) if self.options.kind == "moderation" else _judgement(answer)

    def _headers(self) -> dict[str, str] | None:
        name = self.options.api_key_env
        if name is None:
            return {}
        key = self._environ.get(name)
        if not key:
            log.warning("guard check: the environment variable %s (its key) is not set; refusing", name)
            return None
        return {"Authorization": f"Bearer {key}"}

    def _body(self, text: str) -> dict[str, Any]:
        if self.options.kind == "moderation":
            return {"model": self.options.model, "input": text}
        return {"model": self.options.model, "temperature": 0, "max_tokens": 3,
                "messages": [{"role": "system", "content": JUDGE_PROMPT}, {"role": "user", "content": text}]}


def _moderation(answer: Any) -> str | None:
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list) or not results:
        raise _Unusable
    flagged = [r.get("flagged") if isinstance(r, dict) else None for r in results]
    if not all(isinstance(f, bool) for f in flagged):
        raise _Unusable
    if not any(flagged):
        return None
    categories = results[flagged.index(True)].get("categories")
    named = sorted(k for k, v in categories.items() if v is True) if isinstance(categories, dict) else []
    # A category is the endpoint's own label (a short identifier), never the text it judged.
    return f"check:flagged:{named[0]}" if named and named[0].replace("/", "").replace("-", "").replace("_", "")\
        .isalnum() and len(named[0]) <= 40 else "check:flagged"


def _judgement(answer: Any) -> str | None:
    try:
        content = answer["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise _Unusable from None
    if not isinstance(content, str):
        raise _Unusable
    words = content.strip().strip(".!").upper().split()
    if words == ["ALLOW"]:
        return None
    if words == ["DENY"]:
        return "check:denied"
    raise _Unusable
