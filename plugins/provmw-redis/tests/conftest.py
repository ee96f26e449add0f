"""Fixtures for the tests against the real Redis: a unique key prefix per test, cleaned after it.

Under CI (``CI`` true-looking: ``true``, ``1``, ``yes``) a missing Redis fails these tests; elsewhere they
skip with the reason. ``PROVMW_TEST_REDIS_URL`` names the server (default 127.0.0.1:6379, database 0).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis
from provmw_redis import RedisState

from provmw.ci import service_missing
from provmw.stores.shared import StateSettings
from provmw.testing import FakeProvider

if TYPE_CHECKING:
    from own_server import OwnServer

REDIS_URL = os.environ.get("PROVMW_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
ROOT = Path(__file__).parents[3]


SIGNING_KEY = "a-signing-secret-for-the-tests"


@pytest.fixture(autouse=True)
def _signing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared cache is signed by default; every test (and process it spawns) has the key."""
    monkeypatch.setenv("PROVMW_CACHE_SIGNING_KEY", SIGNING_KEY)


@pytest.fixture(scope="session")
def redis_url() -> str:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1.0).ping()
    except redis.RedisError as exc:
        service_missing(f"no Redis at {REDIS_URL} ({exc})")
    return REDIS_URL


@pytest.fixture
def redis_sync(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def prefix(redis_sync: redis.Redis) -> Iterator[str]:
    """A key prefix of this test's own; every key under it is deleted afterwards."""
    name = f"provmw-test-{uuid.uuid4().hex[:12]}"
    yield name
    keys = list(redis_sync.scan_iter(match=f"*{name}*", count=1000))
    if keys:
        redis_sync.delete(*keys)


def state_settings(prefix: str, **options: object) -> StateSettings:
    return StateSettings(REDIS_URL, options={"key_prefix": prefix, **options})


@pytest.fixture
async def state(prefix: str) -> AsyncIterator[RedisState]:
    backend = RedisState(state_settings(prefix))
    yield backend
    await backend.aclose()


@pytest.fixture
async def fake() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as server:
        yield server


def spawn(script: str, *args: str) -> subprocess.Popen[str]:
    """A Python process running ``script`` (dedented) with ``args``, its stdout a text pipe."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)


@pytest.fixture
def own(tmp_path: Path) -> Iterator[OwnServer]:
    """A redis-server of this test's own, keeping nothing on disk, for tests that kill it."""
    # Imported here: other plugins' tests load this file by its path, where own_server is not importable.
    from own_server import FORGETFUL, OwnServer

    server = OwnServer(tmp_path, FORGETFUL)
    server.start()
    yield server
    server.kill()
