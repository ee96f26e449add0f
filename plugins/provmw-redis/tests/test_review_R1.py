"""Review (issue 38): the Redis key store knows no key by an id no key can have, rather than failing
as if Redis were down (the admin API's 503, which a client retries)."""

from __future__ import annotations

import pytest
from provmw_redis import RedisKeyStore

from provmw.errors import ConfigurationError

from conftest import REDIS_URL

pytestmark = pytest.mark.redis

NOT_A_KEY_ID = "\ud800"  # a lone surrogate: JSON can carry it, Redis cannot be sent it


async def test_an_id_redis_cannot_hold_is_simply_unknown(prefix: str) -> None:
    store = RedisKeyStore.from_url(REDIS_URL, {"key_prefix": prefix})
    assert await store.get(NOT_A_KEY_ID) is None
    with pytest.raises(ConfigurationError, match="no virtual key"):
        await store.set_budget("key", NOT_A_KEY_ID, "day", max_requests=1)
    await store.aclose()
