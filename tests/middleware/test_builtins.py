"""The built-in table: sections parsed by one helper with hints, disabled built-ins never built."""

from __future__ import annotations

from typing import Any

import pytest

from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError
from provmw.manager import ServiceManager
from provmw.middleware import BUILTINS, builtin_middleware
from provmw.plugins import PluginHost
from provmw.pools import Pool
from provmw.settings import Settings
from provmw.state import State


def test_a_disabled_built_in_is_never_built(builtin_only: PluginHost) -> None:
    settings = Settings(middleware={"budget": {"enabled": False}})
    manager = ServiceManager(settings, host=builtin_only)
    assert "budget" not in manager.pipeline.order and "deadline" in manager.pipeline.order


def test_enabled_must_be_true_or_false(builtin_only: PluginHost) -> None:
    with pytest.raises(ConfigurationError, match=r"\[middleware.retry\] enabled: must be true or false, got 0"):
        ServiceManager(Settings(middleware={"retry": {"enabled": 0}}), host=builtin_only)


@pytest.mark.parametrize(("section", "match"), [
    ({"budget": {"limits": [{"scope": "user", "max_cost": 1.0}]}},
     r"\[middleware.budget\]: limits\[0\]: unknown key 'max_cost' \(did you mean 'max_cost_usd'\?\)"),
    ({"rate_limit": {"limits": {"*": {"requests_per_minut": 5}}}},
     r"\[middleware.rate_limit\]: limits.\*: unknown key 'requests_per_minut' \(did you mean 'requests_per_minute'"),
    ({"retry": {"max_attempt": 2}}, r"\[middleware.retry\]: unknown key 'max_attempt' \(did you mean 'max_attempts'"),
], ids=["budget limits", "rate limits", "retry"])
def test_a_misspelt_key_names_the_section_and_a_near_match(section: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        builtin_middleware(Settings(middleware=section), State())


def test_a_built_in_without_options_refuses_any_key_but_enabled() -> None:
    with pytest.raises(ConfigurationError, match=r"\[middleware.timeout\]: unknown key 'limit_s'"):
        builtin_middleware(Settings(middleware={"timeout": {"limit_s": 3}}), State())


def test_every_built_in_is_one_entry_named_as_its_middleware() -> None:
    pools = Settings(configurations={"a": ProviderConfig(identifier="a", provider="openai", model="m")},
                     pools={"p": Pool(name="p", members=("a",))})
    built = builtin_middleware(pools, State())
    assert [m.name for m in built] == [b.name for b in BUILTINS]


def test_the_pool_layer_is_built_only_where_there_are_pools() -> None:
    assert "pool" not in [m.name for m in builtin_middleware(Settings(), State())]


def test_usage_and_usage_hits_share_the_states_journal() -> None:
    state = State()
    built = {m.name: m for m in builtin_middleware(Settings(), state)}
    assert built["usage"].journal is built["usage_hits"].journal is state.usage_journal()  # type: ignore[attr-defined]
