"""The floor: one hand-written function doing the full stack's jobs, for the end-to-end benchmark.

What the README's settings make provmw do on a cache miss, written inline for one OpenAI
endpoint, as a careful application would write it without a library: a deadline on the
call and a time limit on each attempt (``asyncio.timeout``), a cache key scoped to tenant
and user (SHA-256 of the canonical request) in an LRU, a breaker's rolling window, request
and token buckets with a concurrency count, a retry loop over 429 and 5xx answers, the
answer priced from its usage, and one ledger row per attempt: a JSON line written to a
file before the call returns (it survives kill -9, as provmw's write-ahead file does) and
rows batched into SQLite (WAL, ``synchronous=NORMAL``) by a writer task that lingers 20 ms.

It is one careful implementation, not a proof of a lower bound, and it does less than the
full stack: one provider and no fallback chain, no typed requests or answers, no plugins, no
cache TTL or coalescing of identical misses, no retry budget, Retry-After or jitter, the
breaker asked once a call rather than once an attempt, and no rows for cache hits. The
benchmark's ratios of the floor to raw say how much of a goal is the jobs themselves rather
than provmw's way of doing them.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import os
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

__all__ = ["floor"]

_PRICE_IN, _PRICE_OUT = 0.15e-6, 0.60e-6  # USD a token, as the README's price
_COLUMNS = ("call_id", "attempt", "timestamp", "tenant", "user", "model", "input_tokens", "output_tokens",
            "cost_usd", "latency_s", "status")
_RETRIED = frozenset({429, 500, 502, 503, 504})


class _Bucket:
    def __init__(self, per_minute: float) -> None:
        self.per_minute, self.level, self.updated = per_minute, per_minute, time.monotonic()

    def take(self, amount: float) -> bool:
        now = time.monotonic()
        self.level = min(self.per_minute, self.level + (now - self.updated) * self.per_minute / 60)
        self.updated = now
        if self.level < amount:
            return False
        self.level -= amount
        return True


class _Ledger:
    """A JSON line per row before the call returns; rows batched into SQLite by a writer task."""

    def __init__(self, folder: Path) -> None:
        self.db = sqlite3.connect(folder / "floor.sqlite3", isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(f"CREATE TABLE IF NOT EXISTS usage ({', '.join(_COLUMNS)}, PRIMARY KEY (call_id, attempt))")
        self.insert = f"INSERT OR IGNORE INTO usage VALUES ({', '.join('?' * len(_COLUMNS))})"
        self.fd = os.open(folder / "floor.journal", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.pending: list[tuple[Any, ...]] = []
        self.writer: asyncio.Task[None] | None = None

    def record(self, row: tuple[Any, ...]) -> None:
        os.write(self.fd, (json.dumps(row) + "\n").encode())
        self.pending.append(row)
        if self.writer is None or self.writer.done():
            self.writer = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        while self.pending:
            await asyncio.sleep(0.02)
            rows, self.pending = self.pending, []
            self.db.execute("BEGIN")
            self.db.executemany(self.insert, rows)
            self.db.execute("COMMIT")

    async def close(self) -> None:
        if self.writer is not None:
            await self.writer
        os.close(self.fd)
        self.db.close()


@asynccontextmanager
async def floor(url: str, folder: Path, *, key: str, options: Mapping[str, Any],
                prompt: Callable[[], str]) -> AsyncIterator[Callable[[int], Any]]:
    """Yield the floor's call (see the module docstring) on ``url``'s chat completions."""
    session = aiohttp.ClientSession()
    ledger = _Ledger(folder)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    cache: collections.OrderedDict[str, Any] = collections.OrderedDict()
    outcomes: collections.deque[bool] = collections.deque(maxlen=20)  # the breaker's window
    open_until = 0.0  # the breaker is open until then; after it, calls go again
    requests, tokens = _Bucket(100_000_000), _Bucket(100_000_000_000)
    in_flight = 0

    def outcome(ok: bool) -> None:
        nonlocal open_until
        outcomes.append(ok)
        if len(outcomes) >= 10 and outcomes.count(False) / len(outcomes) >= 0.5:
            open_until = time.monotonic() + 30
            outcomes.clear()

    async def attempt(call_id: str, number: int, text: str, tenant: str, user: str) -> tuple[int, Any, int]:
        """One attempt: its status, answer (None unless 2xx) and tokens used; its row written either way."""
        started, status, answer = time.time(), 0, None
        try:
            async with asyncio.timeout(30), session.post(f"{url}/chat/completions", data=text,
                                                         headers=headers) as response:
                status = response.status
                if status < 300:
                    answer = await response.json()
                else:
                    await response.read()  # an error's body: read, not parsed
        except BaseException as exc:
            if isinstance(exc, aiohttp.ClientError | TimeoutError):  # a cancellation says nothing of the endpoint
                outcome(False)
            ledger.record((call_id, number, started, tenant, user, "gpt-4o-mini", 0, 0, None,
                           time.time() - started, "error"))
            raise
        usage = answer.get("usage", {}) if answer is not None else {}
        used_in, used_out = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
        ledger.record((call_id, number, started, tenant, user, "gpt-4o-mini", used_in, used_out,
                       used_in * _PRICE_IN + used_out * _PRICE_OUT, time.time() - started,
                       "ok" if status < 300 else "error"))
        outcome(status < 500)
        return status, answer, used_in + used_out

    async def call(_: int, tenant: str = "acme", user: str = "ada") -> Any:
        nonlocal in_flight
        body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt()}], **options}
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        cache_key = hashlib.sha256(f"{tenant}\0{user}\0{text}".encode()).hexdigest()
        if (found := cache.get(cache_key)) is not None:
            cache.move_to_end(cache_key)
            return found
        if time.monotonic() < open_until:
            raise RuntimeError("breaker open")
        estimate = len(text) // 4 + options["max_tokens"]
        if in_flight >= 1000 or not requests.take(1) or not tokens.take(estimate):
            raise RuntimeError("rate limited")
        in_flight += 1
        call_id, used = uuid.uuid4().hex, 0
        try:
            async with asyncio.timeout(120):
                for number in range(1, 4):
                    try:
                        status, answer, tokens_used = await attempt(call_id, number, text, tenant, user)
                    except (aiohttp.ClientError, TimeoutError):
                        status, answer, tokens_used = 0, None, 0
                    used += tokens_used
                    if answer is not None:
                        break
                    if number == 3 or (status and status not in _RETRIED):
                        raise RuntimeError(f"status {status}" if status else "no answer")
                    await asyncio.sleep(0.5 * 2 ** number)
        finally:
            in_flight -= 1
            tokens.level = min(tokens.per_minute, tokens.level + estimate - used)  # the estimate, corrected
        cache[cache_key] = answer
        if len(cache) > 10_000:
            cache.popitem(last=False)
        return answer

    try:
        yield call
    finally:
        await session.close()
        await ledger.close()
