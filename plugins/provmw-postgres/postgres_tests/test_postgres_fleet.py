"""A fleet, one ledger: hosts with their own ServiceManager write every attempt to one PostgreSQL table.

The hosts are real processes (``fleet_worker.py``) calling the fake provider this test
process serves over loopback HTTP; the fake counts every request it receives, and the
ledger must hold exactly one row per request.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from postgres_tests.conftest import rows
from postgres_tests.fleet_worker import host
from provmw.manager import ServiceManager
from provmw.settings import parse_settings
from provmw.testing import FakeProvider, Fault

pytestmark = pytest.mark.postgres

WORKER = str(Path(__file__).with_name("fleet_worker.py"))
ROOT = Path(__file__).parents[3]
PRICE = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0}


def document(fake: FakeProvider, url: str, schema: str) -> dict[str, Any]:
    """A primary that falls back to a backup, two attempts each, the ledger in ``schema``."""
    return {
        "default": "primary",
        "configurations": {
            "primary": {"provider": "openai", "model": "primary-model", "base_url": fake.openai_base_url,
                        "fallbacks": ["backup"], "price": PRICE},
            "backup": {"provider": "anthropic", "model": "backup-model", "base_url": fake.anthropic_base_url,
                       "price": PRICE}},
        "middleware": {"usage": {"store": url, "schema": schema}, "budget": {"store": "memory"},
                       "retry": {"max_attempts": 2, "base_s": 0.001, "max_wait_s": 0.002, "budget_initial": 1e6},
                       "circuit_breaker": {"enabled": False}},
    }


async def start_hosts(settings: dict[str, Any], processes: int, calls: int, cwd: Path,
                      concurrency: int = 8) -> list[asyncio.subprocess.Process]:
    """Hosts past the start barrier: each built its manager and said ``ready``, then all were told to go."""
    job = json.dumps({"settings": settings, "calls": calls, "concurrency": concurrency})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    hosts = [await asyncio.create_subprocess_exec(sys.executable, WORKER, job, cwd=cwd, env=env,
                                                  stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
             for _ in range(processes)]
    for ready in hosts:
        assert ready.stdout is not None
        assert await ready.stdout.readline() == b"ready\n", "a host died before it was ready"
    for ready in hosts:
        assert ready.stdin is not None
        ready.stdin.write(b"go\n")
        await ready.stdin.drain()
    return hosts


async def test_every_attempt_of_a_call_is_a_row(fake: FakeProvider, postgres_url: str, schema: str) -> None:
    fake.script(Fault(status=503), Fault(status=429), model="primary-model")
    async with ServiceManager(parse_settings(document(fake, postgres_url, schema), "<test>", {}),
                              host=host()) as manager:
        response = await manager.chat("hello", correlation_id="order-7")
    found = rows(postgres_url, schema, "SELECT attempt, config_id, status FROM {table} "
                                       "WHERE correlation_id = 'order-7' ORDER BY attempt")
    assert found == [(1, "primary", "error"), (2, "primary", "error"), (3, "backup", "ok")]
    assert response.served_by == "backup"


@pytest.mark.slow  # four host processes, 2,000 calls
async def test_four_hosts_of_500_calls_write_one_row_per_provider_request(
        fake: FakeProvider, postgres_url: str, schema: str, tmp_path: Path) -> None:
    fake.fail_randomly(0.3, Fault(status=503), model="primary-model")
    fake.fail_randomly(0.2, Fault(status=429), model="backup-model", seed=1)
    hosts = await start_hosts(document(fake, postgres_url, schema), processes=4, calls=500, cwd=tmp_path)
    returned = [(await h.communicate())[0].decode().split() for h in hosts]
    assert [h.returncode for h in hosts] == [0] * 4 and all(out[-1] == "done" for out in returned)
    [(records, calls)] = rows(postgres_url, schema, "SELECT count(*), count(DISTINCT call_id) FROM {table}")
    assert (records, calls) == (fake.count(), 2000)
    assert fake.count(model="primary-model") > 2000 and fake.count(model="backup-model") > 0  # retried, fell back
