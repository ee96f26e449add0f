"""A refused call gives the event loop a turn before its refusal goes out.

A caller that retries every refusal at once would otherwise hold the loop for as long as the
refusal lasts: nothing else in the process runs, neither other callers' I/O nor the tasks
and timers that end an outage.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from provmw.errors import BudgetExceededError, CircuitOpenError, LocalRateLimitError, ProvmwError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider, Fault
from tests.conftest import openai_config


async def refused_with_a_turn(manager: ServiceManager, refusal: type[ProvmwError]) -> bool:
    """Call until refused with ``refusal``; whether the loop ran a callback during that call."""
    for _ in range(10):
        turns: list[bool] = []
        asyncio.get_running_loop().call_soon(turns.append, True)
        try:
            await manager.chat("hi")
        except refusal:
            return turns == [True]
        except ProvmwError:
            pass  # an error that leads to the refusal (the breaker counting failures)
    pytest.fail(f"never refused with {refusal.__name__}")


@pytest.mark.parametrize(("middleware", "refusal"), [
    ({"circuit_breaker": {"window_size": 2, "min_calls": 2, "open_s": 60.0}}, CircuitOpenError),
    ({"rate_limit": {"max_wait_s": 0.0, "limits": {"oa": {"requests_per_minute": 1}}}}, LocalRateLimitError),
    ({"budget": {"store": "memory", "limits": [{"scope": "global", "period": "day", "max_requests": 1}]}},
     BudgetExceededError),
], ids=["circuit_breaker", "rate_limit", "budget"])
async def test_a_refused_call_gives_the_loop_a_turn(fake: FakeProvider, builtin_only: PluginHost,
                                                    middleware: dict[str, Any], refusal: type[ProvmwError]) -> None:
    fake.fail_randomly(1.0 if refusal is CircuitOpenError else 0.0, Fault(status=503))
    settings = Settings(configurations={"oa": openai_config(fake)}, default="oa",
                        middleware={"usage": {"store": "memory"}, "retry": {"max_attempts": 1}, **middleware})
    async with ServiceManager(settings, host=builtin_only) as manager:
        assert await refused_with_a_turn(manager, refusal)
