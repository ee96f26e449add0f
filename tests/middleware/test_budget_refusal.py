"""A strict budget's refusal says what the call needed, which configuration of its fallback chain set
it and why, with the setting that lowers it (issue 39), over real HTTP through a ServiceManager."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from provmw.errors import BudgetExceededError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault
from tests.conftest import SENTINEL_KEY, openai_config
from tests.middleware.test_budget_attempts import reservation

PRICE = {"input_usd_per_mtok": 100.0, "output_usd_per_mtok": 1000.0, "max_output_tokens": 1000}
DEAR = {**PRICE, "output_usd_per_mtok": 2000.0}
QUICK = {"base_s": 0.001, "max_wait_s": 0.001}


def settings(fake: FakeProvider, path: Path, limit: dict[str, Any], *, dear: dict[str, Any] | None = None) -> Settings:
    cheap = openai_config(fake, price=PRICE, options={"max_tokens": 10}, fallbacks=("dear",))
    other = openai_config(fake, identifier="dear", price=DEAR, options=dear or {})
    return Settings(default="oa", configurations={"oa": cheap, "dear": other}, middleware={
        "budget": {"path": str(path), "limits": [{"scope": "global", "period": "total", **limit}]},
        "usage": {"path": str(path)}, "retry": QUICK, "circuit_breaker": {"enabled": False}})


async def refusal(fake: FakeProvider, host: PluginHost, path: Path, limit: dict[str, Any],
                  **options: Any) -> tuple[BudgetExceededError, int]:
    async with ServiceManager(settings(fake, path, limit, **options), host=host) as manager:
        with pytest.raises(BudgetExceededError) as refused:
            await manager.chat("hello")
        return refused.value, reservation(manager, "hello")


async def test_the_refusal_names_the_worst_case_and_the_configuration_that_set_it(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    error, worst = await refusal(fake, builtin_only, tmp_path / "l.sqlite3", {"max_cost_usd": 0.01})
    assert (error.needed, error.set_by, error.further_attempt) == (worst / 1e6, "dear", False)
    assert fake.count() == 0


async def test_a_configuration_without_max_tokens_is_named_with_the_setting_that_lowers_it(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    error, _ = await refusal(fake, builtin_only, tmp_path / "l.sqlite3", {"max_cost_usd": 0.01})
    assert error.reason is not None
    assert "sets no max_tokens" in error.reason and "(max_output_tokens = 1000)" in error.reason
    assert "'dear'" in str(error) and "options.max_tokens" in str(error)
    assert SENTINEL_KEY not in str(error)


async def test_a_configuration_with_max_tokens_is_explained_by_it(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    error, worst = await refusal(fake, builtin_only, tmp_path / "l.sqlite3", {"max_cost_usd": 0.001},
                                 dear={"max_tokens": 500})
    assert (error.needed, error.set_by) == (worst / 1e6, "dear")
    assert error.reason is not None and "up to 500 tokens" in error.reason


async def test_a_token_limit_names_the_largest_max_tokens_of_the_chain(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    error, _ = await refusal(fake, builtin_only, tmp_path / "l.sqlite3", {"max_tokens": 100},
                             dear={"max_tokens": 500})
    assert (error.dimension, error.set_by) == ("tokens", "dear")
    assert error.needed is not None and error.needed > 500
    assert error.reason is not None and "(500, 'dear''s)" in error.reason


async def test_a_refused_further_attempt_says_it_was_one(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite3"
    async with ServiceManager(settings(fake, path, {"max_cost_usd": 1.0}), host=builtin_only) as manager:
        one = reservation(manager, "hello")
    fake.script(Fault(malformed_json=True))
    error, _ = await refusal(fake, builtin_only, path, {"max_cost_usd": math.ceil(one * 1.5) / 1e6})
    assert (error.further_attempt, error.needed, fake.count()) == (True, one / 1e6, 1)
    assert "a further attempt of this call" in str(error)


async def test_an_embedding_refusal_is_explained_by_its_input_alone(
        fake: FakeProvider, builtin_only: PluginHost, tmp_path: Path) -> None:
    async with ServiceManager(settings(fake, tmp_path / "l.sqlite3", {"max_cost_usd": 1e-6}),
                              host=builtin_only) as manager:
        with pytest.raises(BudgetExceededError) as refused:
            await manager.embed("hello")
    assert refused.value.reason is not None and "input tokens" in refused.value.reason
    assert "max_tokens" not in refused.value.reason
