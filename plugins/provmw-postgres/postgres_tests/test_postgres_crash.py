"""kill -9 of a host loses no record of a call that returned: a record is acknowledged by the
ledger before its call returns, so whatever the host printed as returned is in PostgreSQL."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from postgres_tests.conftest import rows
from postgres_tests.test_postgres_fleet import document, start_hosts
from provmw.testing import FakeProvider, Fault

pytestmark = pytest.mark.postgres


async def test_kill_9_loses_no_record_of_a_returned_call(fake: FakeProvider, postgres_url: str, schema: str,
                                                         tmp_path: Path) -> None:
    fake.fail_randomly(0.3, Fault(status=503), model="primary-model")
    [victim] = await start_hosts(document(fake, postgres_url, schema), processes=1, calls=0, cwd=tmp_path)
    assert victim.stdout is not None
    returned = [(await victim.stdout.readline()).decode().strip() for _ in range(300)]
    os.kill(victim.pid, signal.SIGKILL)
    returned += (await victim.stdout.read()).decode().split()  # printed before the kill, still in the pipe
    await victim.wait()
    recorded = {row[0] for row in rows(postgres_url, schema, "SELECT DISTINCT correlation_id FROM {table}")}
    missing = [c for c in returned if c not in recorded]
    assert missing == [], f"{len(missing)} of {len(returned)} returned calls have no record"
