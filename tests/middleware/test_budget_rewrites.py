"""A strict budget reserves on what is sent: a repair turn below it (a rewrite into a longer request)
reserves its own, larger worst case, not the first attempt's again (ADR 0040, ADR 0048)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from provmw.errors import StructuredOutputError
from provmw.manager import ServiceManager
from provmw.middleware.budget import BudgetLimit, BudgetMiddleware, BudgetOptions
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.stores.budgets import Charge, MemoryBudgetStore, Refusal
from provmw.testing import FakeProvider
from tests.conftest import openai_config

PRICE = {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0, "max_output_tokens": 200}
# The fake answers "echo: ...", which this pattern refuses: the call gets its one repair turn.
UNANSWERABLE = {"type": "object", "properties": {"city": {"type": "string", "pattern": "^[A-Z]+$"}},
                "required": ["city"]}


class Recording(MemoryBudgetStore):
    """A memory store that notes the cost each reservation asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    async def reserve(self, reservation_id: str, charges: Sequence[Charge], *, now: float,
                      lease_s: float) -> Refusal | None:
        self.asked.append(charges[0].amount.cost_micro_usd)
        return await super().reserve(reservation_id, charges, now=now, lease_s=lease_s)


async def test_a_repair_turn_reserves_its_own_larger_worst_case(fake: FakeProvider,
                                                                 builtin_only: PluginHost) -> None:
    store = Recording()
    budget = BudgetMiddleware(BudgetOptions(mode="strict", limits=(BudgetLimit(scope="global", max_cost_usd=10.0),)),
                              store=store)
    budget.name = "probe"  # beside the built-in one, which has no limits here
    settings = Settings(configurations={"oa": openai_config(fake, price=PRICE)}, default="oa")
    async with ServiceManager(settings, host=builtin_only, middleware=[budget]) as manager:
        with pytest.raises(StructuredOutputError):  # the repaired answer still breaks the schema
            await manager.chat("Paris " * 50, response_schema=UNANSWERABLE, max_tokens=100)
    first, repair = store.asked
    assert repair > first


async def test_a_repair_turn_reserves_against_the_limits_the_call_touches_only(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    # Another tenant's strict cost limit cannot be computed for an unpriced call; it does not apply here.
    store = Recording()
    limits = (BudgetLimit(scope="tenant", match="other", max_cost_usd=1.0),
              BudgetLimit(scope="global", max_requests=10))
    budget = BudgetMiddleware(BudgetOptions(mode="strict", limits=limits), store=store)
    budget.name = "probe"
    settings = Settings(configurations={"oa": openai_config(fake)}, default="oa")
    async with ServiceManager(settings, host=builtin_only, middleware=[budget]) as manager:
        with pytest.raises(StructuredOutputError):
            await manager.chat("Paris", response_schema=UNANSWERABLE, max_tokens=100, tenant="acme")
    assert len(store.asked) == 2
