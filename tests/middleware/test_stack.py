"""The built-in stack as the manager builds it: order, settings, controls, attempts."""

from __future__ import annotations

import pytest

from provmw.errors import ConfigurationError, FallbackExhaustedError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import Settings, parse_settings
from provmw.testing import FakeProvider, Fault
from tests.conftest import BUILTIN_MIDDLEWARE, anthropic_config, openai_config

FAST_RETRY = {"retry": {"base_s": 0.001, "max_wait_s": 0.01}}


def failover_settings(fake: FakeProvider, **middleware: dict[str, object]) -> Settings:
    return Settings(configurations={"oa": openai_config(fake, fallbacks=("an",)), "an": anthropic_config(fake)},
                    default="oa", middleware={**FAST_RETRY, **middleware})


def test_the_resolved_built_in_order_is_pinned(builtin_only: PluginHost) -> None:
    manager = ServiceManager(Settings(), host=builtin_only)
    assert manager.pipeline.order == BUILTIN_MIDDLEWARE
    assert [(e.name, e.priority, e.plugin) for e in manager.stack] == [
        ("deadline", 850, "provmw"), ("usage_hits", 810, "provmw"), ("idempotency", 805, "provmw"),
        ("cache", 800, "provmw"),
        ("budget", 700, "provmw"), ("fallback", 600, "provmw"), ("rate_limit", 550, "provmw"),
        ("structured_output", 520, "provmw"), ("retry", 500, "provmw"), ("circuit_breaker", 400, "provmw"),
        ("usage", 300, "provmw"), ("timeout", 200, "provmw")]


def test_the_first_party_call_log_plugin_sits_outermost() -> None:
    manager = ServiceManager(Settings(), host=PluginHost(PluginPolicy(allow=("calllog",)), environ={}))
    assert manager.pipeline.order == ("call_log", *BUILTIN_MIDDLEWARE)


def test_a_built_in_middleware_can_be_switched_off(builtin_only: PluginHost) -> None:
    manager = ServiceManager(Settings(middleware={"rate_limit": {"enabled": False}}), host=builtin_only)
    assert "rate_limit" not in manager.pipeline.order


def test_an_unknown_key_in_a_section_names_file_section_and_a_near_match(builtin_only: PluginHost) -> None:
    settings = parse_settings({"middleware": {"retry": {"max_attempt": 5}}}, "provmw.toml", {})
    with pytest.raises(ConfigurationError, match=r"provmw.toml: \[middleware.retry\]: unknown key 'max_attempt' "
                                                 r"\(did you mean 'max_attempts'\?\)"):
        ServiceManager(settings, host=builtin_only)


def test_a_bad_value_in_a_section_names_the_key(builtin_only: PluginHost) -> None:
    settings = parse_settings({"middleware": {"circuit_breaker": {"failure_rate": 2}}}, "provmw.toml", {})
    expected = r"\[middleware.circuit_breaker\]: failure_rate must be a number > 0 and <= 1, got 2"
    with pytest.raises(ConfigurationError, match=expected):
        ServiceManager(settings, host=builtin_only)


def test_rate_limits_for_an_unknown_configuration_are_refused(fake: FakeProvider, builtin_only: PluginHost) -> None:
    settings = Settings(configurations={"primary": openai_config(fake, identifier="primary")},
                        middleware={"rate_limit": {"limits": {"primray": {"requests_per_minute": 5}}}})
    with pytest.raises(ConfigurationError, match="'primray' names no configuration.*did you mean 'primary'"):
        ServiceManager(settings, host=builtin_only)


async def test_an_unknown_control_is_refused_with_a_hint(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(failover_settings(fake), host=builtin_only) as manager:
        with pytest.raises(ConfigurationError, match="'deadline' .*did you mean 'deadline_s'"):
            await manager.chat("hi", controls={"deadline": 5})
    assert fake.count() == 0


async def test_the_response_lists_every_attempt_that_reached_a_provider(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.script(Fault(status=503), Fault(status=503), Fault(status=503), model="gpt-test")
    async with ServiceManager(failover_settings(fake), host=builtin_only) as manager:
        response = await manager.chat("hi")
    assert response.served_by == "an"
    assert [(a.config_id, a.error_type, a.status) for a in response.attempts] == [
        ("oa", "ProviderUnavailableError", 503)] * 3 + [("an", None, None)]


async def test_a_first_time_success_has_one_attempt(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(failover_settings(fake), host=builtin_only) as manager:
        response = await manager.chat("hi")
    assert [(a.config_id, a.error_type) for a in response.attempts] == [("oa", None)]


async def test_exhaustion_through_the_manager_lists_each_configuration(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.fail_randomly(1.0, Fault(status=500))
    async with ServiceManager(failover_settings(fake), host=builtin_only) as manager:
        with pytest.raises(FallbackExhaustedError) as caught:
            await manager.chat("hi")
    assert [a.config_id for a in caught.value.attempts] == ["oa", "an"]
    assert fake.count() == 6


async def test_the_deadline_control_bounds_the_whole_call(fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.fail_randomly(1.0, Fault(delay_s=5))
    async with ServiceManager(failover_settings(fake), host=builtin_only) as manager:
        with pytest.raises(TimeoutError, match="deadline of 0.05s"):
            await manager.chat("hi", controls={"deadline_s": 0.05})
