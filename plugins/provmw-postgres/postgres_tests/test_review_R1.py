"""Review (issue 38): the PostgreSQL key store while its database is silent, and what it refuses
rather than handing to PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest
from provmw_postgres import PostgresKeyOptions, PostgresKeyStore, PostgresKeysUnavailableError

from postgres_tests.proxy import TcpProxy

pytestmark = pytest.mark.postgres

CONNECT_S, STATEMENT_S = 1.0, 0.5
BOUND_S = max(CONNECT_S, STATEMENT_S + 1.0)  # the most one call may wait for its own connection or statement
QUEUED = 12  # requests of distinct keys reaching one server at once: each is a store read


async def test_requests_waiting_for_a_silent_database_are_each_answered_within_its_bound(
        postgres_url: str, schema: str) -> None:
    """The store has one connection used by one call at a time: a call that waited for it while the call
    before found the database silent is unavailable too, not one more bound later than that one."""
    async with TcpProxy() as proxy:
        store = PostgresKeyStore(proxy.url(), PostgresKeyOptions(schema=schema, connect_timeout_s=CONNECT_S,
                                                                 statement_timeout_s=STATEMENT_S))
        _, record = await store.create("acme")
        proxy.mode = "silent"
        loop = asyncio.get_running_loop()
        started = loop.time()

        async def waited(call: asyncio.Future[object]) -> float:
            with pytest.raises(PostgresKeysUnavailableError):
                await call
            return loop.time() - started

        async with asyncio.timeout(QUEUED * BOUND_S + 30):  # stops a hang; the bound is what is tested
            waits = await asyncio.gather(*(waited(asyncio.ensure_future(store.get(record.key_id)))
                                           for _ in range(QUEUED)))
        proxy.mode = "forward"
        await store.aclose()
    assert max(waits) < 2 * BOUND_S  # unbounded, the last waited about QUEUED connection timeouts
