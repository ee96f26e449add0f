"""With default settings a call that never gets an answer ends, and a fallback gets its turn."""

from __future__ import annotations

import pytest

from provmw.config import ProviderConfig
from provmw.errors import DeadlineExceededError
from provmw.manager import ServiceManager
from provmw.middleware import DEADLINE, section_options
from provmw.middleware.retry import RetryOptions
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault


def test_default_settings_give_every_call_a_deadline_of_two_minutes() -> None:
    assert section_options(Settings(), DEADLINE).default_s == 120.0


def test_an_attempt_is_limited_to_thirty_seconds_by_default() -> None:
    assert ProviderConfig(identifier="a", provider="openai", model="m").timeout_s == 30.0


def test_a_hung_primary_spends_less_than_the_default_deadline_on_its_attempts() -> None:
    primary = ProviderConfig(identifier="a", provider="openai", model="m")
    deadline_s = section_options(Settings(), DEADLINE).default_s
    assert deadline_s is not None
    assert RetryOptions().max_attempts * primary.timeout_s < deadline_s


async def test_a_provider_that_never_answers_ends_at_the_default_deadline(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    fake.fail_randomly(1.0, Fault(delay_s=30))  # accepts every request, answers none in time
    # The defaults scaled down 600 times (30 s -> 0.05 s, 120 s -> 0.2 s), so the test waits 0.2 s.
    configs = {name: ProviderConfig(identifier=name, provider="openai", model=name, base_url=fake.openai_base_url,
                                    timeout_s=0.05, fallbacks=fallbacks) for name, fallbacks in (("a", ("b",)),
                                                                                                 ("b", ()))}
    middleware = {"deadline": {"default_s": 0.2}, "retry": {"base_s": 0.001}, "usage": {"store": "memory"},
                  "budget": {"store": "memory"}}
    settings = Settings(configurations=configs, middleware=middleware)
    async with ServiceManager(settings, host=builtin_only) as manager:
        with pytest.raises(DeadlineExceededError):
            await manager.chat("hi", configuration="a")
