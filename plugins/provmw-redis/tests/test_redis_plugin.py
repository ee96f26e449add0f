"""Installing the plugin and naming a Redis URL is all it takes; mistakes in [state] are named."""

from __future__ import annotations

import asyncio
import io
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from provmw_redis import RedisState
from provmw_redis.breakers import RedisBreakerStore
from provmw_redis.budgets import RedisBudgetStore
from provmw_redis.cache import RedisCacheStore
from provmw_redis.rate_limits import RedisRateLimiter

from provmw.cli import main
from provmw.errors import BudgetUnavailableError, ConfigurationError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import parse_settings
from provmw.stores.cache import MemoryCacheStore
from provmw.testing import FakeProvider

from conftest import REDIS_URL

BUDGET = {"limits": [{"scope": "global", "period": "day", "max_cost_usd": 1.0}]}
CONFIGURATIONS = {"main": {"provider": "openai", "model": "gpt-4o-mini", "base_url": "http://127.0.0.1:1/v1"}}


def build(state: dict[str, Any], **middleware: Any) -> ServiceManager:
    document = {"configurations": CONFIGURATIONS, "middleware": middleware, "state": state}
    return ServiceManager(parse_settings(document, "provmw.toml", {}), host=PluginHost(PluginPolicy(), environ={}))


def layer(manager: ServiceManager, name: str) -> Any:
    return next(m for m in manager.pipeline.middlewares if m.name == name)


def test_a_redis_url_puts_all_four_concerns_in_redis() -> None:
    manager = build({"url": REDIS_URL})
    assert isinstance(manager.state.shared, RedisState)
    # Each store sits behind the outage rule's guard (provmw.stores.outage).
    assert isinstance(layer(manager, "cache").store.store, RedisCacheStore)
    assert isinstance(layer(manager, "budget").store.store, RedisBudgetStore)
    assert isinstance(layer(manager, "circuit_breaker").store.shared, RedisBreakerStore)
    assert isinstance(layer(manager, "rate_limit").limiter.shared, RedisRateLimiter)


def test_shared_picks_the_concerns_that_live_in_redis() -> None:
    manager = build({"url": REDIS_URL, "shared": ["budget"]})
    assert isinstance(layer(manager, "budget").store.store, RedisBudgetStore)
    assert isinstance(layer(manager, "cache").store.store, MemoryCacheStore)


def test_a_scheme_no_plugin_serves_is_named() -> None:
    with pytest.raises(ConfigurationError, match="no installed plugin serves memcached:// state"):
        build({"url": "memcached://127.0.0.1:11211"})


def test_an_unknown_key_is_refused_with_a_hint() -> None:
    with pytest.raises(ConfigurationError, match=r"\[state\]: unknown key 'key_prefx'.*key_prefix"):
        build({"url": REDIS_URL, "key_prefx": "app"})


def test_a_key_prefix_with_braces_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="key_prefix"):
        build({"url": REDIS_URL, "key_prefix": "{app}"})


def test_a_missing_signing_key_variable_is_named() -> None:
    with pytest.raises(ConfigurationError, match="PROVMW_NO_SUCH_VARIABLE is not set"):
        build({"url": REDIS_URL, "signing_key_env": "PROVMW_NO_SUCH_VARIABLE"})


async def test_the_url_s_password_appears_in_no_repr_or_error() -> None:
    url = "redis://:hunter2-SECRET@127.0.0.1:1/0"
    async with build({"url": url}, budget=BUDGET) as manager:
        assert "hunter2" not in repr(manager.settings) and "hunter2" not in repr(manager.state.shared.client)  # type: ignore[union-attr]
        with pytest.raises(BudgetUnavailableError) as refused:
            await manager.chat("hello")
    assert "hunter2" not in str(refused.value) and "hunter2" not in repr(refused.value.__cause__)


@pytest.mark.redis
async def test_provmw_budget_reads_the_shared_buckets(fake: FakeProvider, prefix: str, tmp_path: Path) -> None:
    config = tmp_path / "provmw.toml"
    config.write_text(textwrap.dedent(f"""
        [configurations.main]
        provider = "openai"
        model = "gpt-4o-mini"
        base_url = "{fake.openai_base_url}"
        [middleware.usage]
        store = "memory"
        [[middleware.budget.limits]]
        scope = "global"
        period = "total"
        max_cost_usd = 1.0
        [state]
        url = "{REDIS_URL}"
        key_prefix = "{prefix}"
    """))
    async with ServiceManager.from_file(config, host=PluginHost(PluginPolicy(), environ={})) as manager:
        await manager.chat("hello")
    out = io.StringIO()
    assert await asyncio.to_thread(main, ["--config", str(config), "budget", "--format", "json"], out) == 0
    [row] = json.loads(out.getvalue())
    assert (row["scope"], row["subject"], row["requests"], row["reserved_usd"]) == ("global", "*", 1, 0.0)
    assert not (tmp_path / "provmw.sqlite3").exists()  # nothing was kept locally


def test_provmw_stack_names_the_shared_state_without_its_password(tmp_path: Path) -> None:
    config = tmp_path / "provmw.toml"
    config.write_text('[state]\nurl = "redis://:hunter2@127.0.0.1:6379/0"\nshared = ["budget", "cache"]\n')
    out = io.StringIO()
    assert main(["--config", str(config), "stack"], out) == 0
    assert "shared state: redis://:***@127.0.0.1:6379/0 (budget, cache)" in out.getvalue()
    assert "hunter2" not in out.getvalue()
