"""``provmw serve --workers N`` as a subprocess: the fleet promises of issue 38.

The load test: 4 workers, 20 keys in 4 teams of one organisation, budgets at key, team and
organisation level (some small enough to be hit), upstream failures injected (500s and 429s),
500 concurrent requests. Every request is answered or refused with the right status; a thread
samples the budget file all along and no bucket ever holds more than its limit; the ledger the
workers share has one row per request the fake received. The parent's own promises (a worker
that dies is started again, a fleet that cannot start exits non-zero) have quick tests of their own.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import multiprocessing
import os
import re
import signal
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest

from provmw import errors
from provmw.gateway import SqliteKeyStore
from provmw.testing import FakeProvider, Fault

REQUESTS = 500
KEYS_PER_TEAM = 5
TEAMS = ("t0", "t1", "t2", "t3")
ORGANISATION = "acme"
# (scope, subject) -> (dimension, limit): key limits on team t0's keys, team limits on t1 and t2, and
# one on the organisation, each below what its share of the 500 requests would take.
KEY_REQUESTS, T1_REQUESTS, T2_TOKENS, ORG_REQUESTS = 10, 60, 2500, 250
BUCKET = re.compile(r"budget '(key|team|organisation):([^']+)'")


@attrs.frozen
class Fleet:
    url: str
    process: asyncio.subprocess.Process
    stderr: Path


def _settings(tmp_path: Path, fake: FakeProvider) -> Path:
    settings = tmp_path / "provmw.toml"
    settings.write_text(
        f'[configurations.chat]\nprovider = "openai"\nmodel = "gpt-4o-mini"\nbase_url = "{fake.openai_base_url}"\n'
        f'api_key_env = "FLEET_UPSTREAM_KEY"\n[middleware.usage]\npath = "{tmp_path / "ledger.sqlite3"}"\n'
        f'[middleware.budget]\npath = "{tmp_path / "budget.sqlite3"}"\n'
        # Short backoff: the retries of injected failures take milliseconds, not the default half seconds.
        '[middleware.retry]\nbase_s = 0.02\nmax_wait_s = 0.1\n[plugins]\nautoload = false\n')
    return settings


async def _keys(path: Path) -> tuple[list[str], Limits]:
    """20 keys in 4 teams and their budgets; the limits by (scope, subject)."""
    store = SqliteKeyStore(path)
    keys: list[str] = []
    limits: Limits = {}
    for team in TEAMS:
        for _ in range(KEYS_PER_TEAM):
            key, record = await store.create(ORGANISATION, team=team)
            keys.append(key)
            if team == "t0":
                await store.set_budget("key", record.key_id, "total", max_requests=KEY_REQUESTS)
                limits["key", record.key_id] = ("requests", KEY_REQUESTS)
    await store.set_budget("team", f"{ORGANISATION}/t1", "total", max_requests=T1_REQUESTS)
    await store.set_budget("team", f"{ORGANISATION}/t2", "total", max_tokens=T2_TOKENS)
    await store.set_budget("organisation", ORGANISATION, "total", max_requests=ORG_REQUESTS)
    await store.aclose()
    limits.update({("team", f"{ORGANISATION}/t1"): ("requests", T1_REQUESTS),
                   ("team", f"{ORGANISATION}/t2"): ("tokens", T2_TOKENS),
                   ("organisation", ORGANISATION): ("requests", ORG_REQUESTS)})
    return keys, limits


@asynccontextmanager
async def _served(settings: Path, keys: Path, workers: int, *extra: str) -> AsyncIterator[Fleet]:
    stderr = settings.parent / f"serve-{workers}.err"
    with stderr.open("wb") as errors:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "provmw.cli", "--config", str(settings), "serve", "--port", "0", "--keys", str(keys),
            "--workers", str(workers), "--shutdown-grace-s", "10", *extra, stdout=asyncio.subprocess.PIPE,
            stderr=errors, env={**os.environ, "FLEET_UPSTREAM_KEY": "sk-upstream"})
    assert process.stdout is not None
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        assert "listening on " in line, (line, stderr.read_text())
        yield Fleet(line.rsplit(" ", 1)[1].strip(), process, stderr)
    finally:
        if process.returncode is None:
            process.kill()
        # Reaped, and its stdout read to the end (the workers hold it too): the transport closes in this loop.
        await process.communicate()


Limits = dict[tuple[str, str], tuple[str, int]]


class BudgetSampler:
    """A process of its own (no share of this one's GIL) reading every bucket's spent + reserved
    from the budget file every few ms; ``peaks`` and ``samples`` once it stopped."""

    def __init__(self, path: Path, limits: Limits) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._results, theirs = context.Pipe(duplex=False)
        self._process = context.Process(target=_sample_budgets, args=(str(path), limits, self._stop, theirs))
        self.peaks: dict[tuple[str, str], int] = {}
        self.samples = 0

    @asynccontextmanager
    async def running(self) -> AsyncIterator[BudgetSampler]:
        self._process.start()
        try:
            assert await asyncio.to_thread(self._results.poll, 60), "the sampler did not start"
            assert self._results.recv() == "sampling"
            yield self
        finally:
            self._stop.set()
            if await asyncio.to_thread(self._results.poll, 30):
                self.samples, self.peaks = self._results.recv()
            self._process.join(30)


def _sample_budgets(path: str, limits: Limits, stop: EventType, results: Connection) -> None:
    peaks: dict[tuple[str, str], int] = collections.defaultdict(int)
    samples = 0
    with sqlite3.connect(path, timeout=5) as connection:
        results.send("sampling")
        while not stop.wait(0.002):  # the sampling pace, not a wait for anything
            with contextlib.suppress(sqlite3.OperationalError):  # no table yet: no budget step was taken
                _sample(connection, limits, peaks)
                samples += 1
    results.send((samples, dict(peaks)))


def _sample(connection: sqlite3.Connection, limits: Limits, peaks: dict[tuple[str, str], int]) -> None:
    # Every reservation counts, expired or not: stricter than the store, which drops expired ones.
    rows = connection.execute(
        "SELECT b.scope, b.subject, b.tokens + COALESCE((SELECT SUM(tokens) FROM budget_reservations AS r "
        "WHERE r.key = b.key), 0), b.requests + COALESCE((SELECT SUM(requests) FROM budget_reservations AS r "
        "WHERE r.key = b.key), 0) FROM budget_buckets AS b").fetchall()
    for scope, subject, tokens, requests in rows:
        if (scope, subject) in limits:
            held = tokens if limits[scope, subject][0] == "tokens" else requests
            peaks[scope, subject] = max(peaks[scope, subject], held)


async def _call(client: aiohttp.ClientSession, url: str, key: str, n: int) -> tuple[int, dict[str, Any]]:
    body = {"model": "chat", "max_tokens": 16, "messages": [{"role": "user", "content": f"request number {n}"}]}
    async with client.post(f"{url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}) as got:
        return got.status, json.loads(await got.read())


# Refusals met inside the stack (a retry refused by its budget) have a ledger row too, billed "no",
# for an attempt that never left: the rows of attempts sent are the others.
NEVER_SENT = tuple(name for name, kind in vars(errors).items() if isinstance(kind, type)
                   and issubclass(kind, Exception) and getattr(kind, "never_sent", False) is True)


def _ledger_rows(path: Path) -> tuple[int, int]:
    """The ledger's rows of attempts sent, and of attempts refused before they were."""
    marks = ", ".join("?" * len(NEVER_SENT))
    with sqlite3.connect(path) as connection:
        refused = connection.execute(f"SELECT COUNT(*) FROM usage WHERE status = 'error' AND error_type IN ({marks})",
                                     NEVER_SENT).fetchone()[0]
        return int(connection.execute("SELECT COUNT(*) FROM usage").fetchone()[0]) - refused, int(refused)


def _refusal_kinds(answers: list[tuple[int, dict[str, Any]]]) -> collections.Counter[str]:
    """Each answer as 200, 429 budget:<scope>, 429 upstream, 502, 503, or else what it was."""
    kinds: collections.Counter[str] = collections.Counter()
    for status, body in answers:
        error = body.get("error", {}) if status != 200 else {}
        bucket = BUCKET.search(error.get("message", "")) if error.get("code") == "budget_exceeded" else None
        if status == 429 and bucket is not None:
            kinds[f"429 budget:{bucket[1]}"] += 1
        elif status == 429 and error.get("code") == "rate_limit_exceeded":
            kinds["429 upstream rate limit"] += 1
        else:
            kinds[str(status) if status in (200, 502, 503) else f"unexpected {status}: {error}"] += 1
    return kinds


async def _load(url: str, keys: list[str], sampler: BudgetSampler) -> tuple[list[tuple[int, dict[str, Any]]], float]:
    """``REQUESTS`` calls at once over ``keys`` while ``sampler`` samples; the answers and the seconds taken."""
    async with sampler.running(), aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:
        started = time.perf_counter()
        answers = await asyncio.gather(*(_call(client, url, keys[n % len(keys)], n) for n in range(REQUESTS)))
        return answers, time.perf_counter() - started


@pytest.mark.slow
async def test_four_workers_hold_every_budget_under_500_concurrent_requests(fake: FakeProvider,
                                                                            tmp_path: Path) -> None:
    keys, limits = await _keys(tmp_path / "keys.sqlite3")
    fake.fail_randomly(0.1, Fault(status=500), route="chat")
    fake.fail_randomly(0.05, Fault(status=429), seed=1)
    sampler = BudgetSampler(tmp_path / "budget.sqlite3", limits)
    async with _served(_settings(tmp_path, fake), tmp_path / "keys.sqlite3", 4) as fleet:
        answers, seconds = await _load(fleet.url, keys, sampler)
        fleet.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(fleet.process.wait(), 60) == 0
    kinds, (rows, refused) = _refusal_kinds(answers), _ledger_rows(tmp_path / "ledger.sqlite3")
    print(f"\nfleet: {REQUESTS} requests in {seconds:.2f} s: {dict(kinds)}; {sampler.samples} samples; peaks "
          f"{[(s, p, sampler.peaks[s, p], limits[s, p]) for s, p in limits]}; ledger rows of attempts sent {rows} "
          f"(and {refused} refused before sending), upstream requests {fake.count()}")
    assert sum(kinds.values()) == REQUESTS and not [kind for kind in kinds if kind.startswith("unexpected")]
    assert all(kinds[f"429 budget:{scope}"] for scope in ("key", "team", "organisation")) and kinds["200"]
    assert sampler.samples >= 10 and set(sampler.peaks) == set(limits)
    assert all(sampler.peaks[bucket] <= limit for bucket, (_, limit) in limits.items())
    assert rows == fake.count()


async def _one_key(path: Path) -> str:
    store = SqliteKeyStore(path)
    key, _ = await store.create(ORGANISATION)
    await store.aclose()
    return key


async def _logged(path: Path, pattern: str, within_s: float = 30.0) -> re.Match[str]:
    """The first line of the log at ``path`` matching ``pattern``, polled for until ``within_s``."""
    deadline = time.monotonic() + within_s
    while (found := re.search(pattern, _text(path))) is None:
        assert time.monotonic() < deadline, f"no {pattern!r} in {_text(path)}"
        await asyncio.sleep(0.02)
    return found


def _text(path: Path) -> str:
    return path.read_text()


@pytest.mark.slow  # worker processes started and stopped
async def test_a_worker_that_dies_is_started_again(fake: FakeProvider, tmp_path: Path) -> None:
    key = await _one_key(tmp_path / "keys.sqlite3")
    async with _served(_settings(tmp_path, fake), tmp_path / "keys.sqlite3", 2, "-v") as fleet:
        first = await _logged(fleet.stderr, r"worker 0 \(pid (\d+)\) listening")
        os.kill(int(first[1]), signal.SIGKILL)
        again = await _logged(fleet.stderr, r"worker 0 started again \(pid (\d+)\)")
        async with aiohttp.ClientSession() as client:
            statuses = [(await _call(client, fleet.url, key, n))[0] for n in range(4)]
        fleet.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(fleet.process.wait(), 60) == 0
    assert again[1] != first[1] and statuses == [200] * 4


@pytest.mark.slow  # worker processes started and stopped
async def test_sigterm_to_the_parent_lets_a_stream_in_flight_finish(fake: FakeProvider, tmp_path: Path) -> None:
    key = await _one_key(tmp_path / "keys.sqlite3")
    fake.script(Fault(stall_after=2, stall_s=0.3))
    body = {"model": "chat", "stream": True, "messages": [{"role": "user", "content": "hello there"}]}
    async with _served(_settings(tmp_path, fake), tmp_path / "keys.sqlite3", 2) as fleet:
        async with aiohttp.ClientSession() as client, client.post(
                f"{fleet.url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}) as stream:
            first = await stream.content.readline()
            fleet.process.send_signal(signal.SIGTERM)
            rest = await stream.content.read()
        assert await asyncio.wait_for(fleet.process.wait(), 60) == 0
    assert first.startswith(b"data: ") and rest.rstrip().endswith(b"data: [DONE]")


async def test_workers_that_cannot_start_make_the_parent_exit_non_zero(tmp_path: Path) -> None:
    settings = tmp_path / "provmw.toml"
    # Valid settings whose manager cannot be built: the parent reads them, every worker fails.
    settings.write_text('[configurations.chat]\nprovider = "no-such-provider"\nmodel = "m"\n'
                        '[plugins]\nautoload = false\n')
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "provmw.cli", "--config", str(settings), "serve", "--port", "0", "--workers", "2",
        "--keys", str(tmp_path / "keys.sqlite3"), stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL)
    _, errors = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 1
    assert b"worker 0 did not start (exit code 2)" in errors and b"no provider adapter" in errors


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


async def test_workers_stop_when_their_parent_is_killed(fake: FakeProvider, tmp_path: Path) -> None:
    await _one_key(tmp_path / "keys.sqlite3")
    async with _served(_settings(tmp_path, fake), tmp_path / "keys.sqlite3", 2, "-v") as fleet:
        found = [await _logged(fleet.stderr, rf"worker {n} \(pid (\d+)\) listening") for n in range(2)]
        fleet.process.kill()
        workers = [int(match[1]) for match in found]
        deadline = time.monotonic() + 30
        while any(_running(pid) for pid in workers):
            assert time.monotonic() < deadline, "a worker still serves without its parent"
            await asyncio.sleep(0.02)
