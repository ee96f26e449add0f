"""The attempt rule (ADR 0040) for every sequence of attempts: what a strict bucket settles is never
below what the ledger records as billed, never above the reservations the call took."""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from provmw.config import ProviderConfig
from provmw.context import attempt_meters
from provmw.errors import BudgetExceededError, ProviderError, ProviderTimeoutError
from provmw.middleware.budget import BudgetMiddleware, BudgetOptions
from provmw.responses import CompletionResponse, Usage
from provmw.stores.budgets import Amounts, MemoryBudgetStore
from provmw.stores.usage import billed_for
from provmw.testing import ScriptedNext, call_context

CONFIG = ProviderConfig(identifier="oa", provider="openai", model="m", price={"input_usd_per_mtok": 1.0,
                        "output_usd_per_mtok": 2.0, "max_output_tokens": 100})
PLANNED_USD = 0.0005  # one attempt's worst case: 500 micro-dollars

# An attempt: never sent, answered with an error status, sent with unknown usage, cancelled, or
# answered with a cost (at most its worst case: a larger one is refused by the terminal).
outcome = st.one_of(st.sampled_from(["unsent", "status", "unknown", "cancelled"]),
                    st.floats(min_value=0, max_value=PLANNED_USD, allow_nan=False))


def raised(kind: str) -> BaseException:
    return {"unsent": ProviderError("refused", never_sent=True), "status": ProviderError("busy", status=503),
            "unknown": ProviderTimeoutError("slow"), "cancelled": asyncio.CancelledError()}[kind]


async def play(outcomes: list[Any], ledger: list[float | None]) -> CompletionResponse:
    """A terminal as the manager's: each attempt told to the meters before it leaves and once it ended."""
    for i, result in enumerate(outcomes):
        for meter in attempt_meters():
            await meter.sending(CONFIG)
        if isinstance(result, float):
            usage = Usage(input_tokens=1, output_tokens=1, cost_usd=result)
            for meter in attempt_meters():
                await meter.ended(CONFIG, "yes", usage)
            ledger.append(result)
            if i == len(outcomes) - 1:
                return CompletionResponse(text="ok", usage=usage, provider="openai", model="m")
            continue
        exc = raised(result)
        ledger.append(0.0 if billed_for(exc) == "no" else None)
        for meter in attempt_meters():
            await meter.ended(CONFIG, billed_for(exc), None)
        if i == len(outcomes) - 1 or result == "cancelled":
            raise exc
    raise AssertionError("no attempt")


async def settle(outcomes: list[Any], fit: int) -> tuple[int, int, int, int]:
    """(billed in the ledger, spent, reserved, most the reservations allowed), micro-dollars, once the call is over."""
    store = MemoryBudgetStore()
    limit = {"scope": "global", "period": "total", "max_cost_usd": PLANNED_USD * fit}
    layer = BudgetMiddleware(BudgetOptions(limits=[limit]), store=store)
    ctx, ledger = call_context(planned_cost_usd=PLANNED_USD, max_output_tokens=100), list[float | None]()
    # The call may fail, or a further attempt that did not fit may be refused before it is sent.
    with contextlib.suppress(ProviderError, BudgetExceededError, asyncio.CancelledError):
        await layer.handle(ctx, CONFIG, lambda config: play(outcomes, ledger))
    [state] = await store.states(now=layer._clock())
    billed = sum(math.ceil(round(cost * 1e6, 3)) for cost in ledger if cost is not None)
    return billed, state.spent.cost_micro_usd, state.reserved.cost_micro_usd, len(ledger) * round(PLANNED_USD * 1e6)


@settings(max_examples=200, deadline=None)
@given(st.lists(outcome, min_size=1, max_size=6), st.integers(min_value=1, max_value=8))
def test_a_bucket_settles_between_the_ledger_and_the_reservations(outcomes: list[Any], fit: int) -> None:
    billed, spent, reserved, most = asyncio.run(settle(outcomes, fit))
    assert billed <= spent <= most and reserved == 0
    assert spent <= PLANNED_USD * fit * 1e6


class HeldSettles(MemoryBudgetStore):
    """A store whose settles wait until the test lets them go (a slow round trip)."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting, self.go = asyncio.Event(), asyncio.Event()

    async def settle(self, reservation_id: str, actual: Amounts) -> None:
        self.waiting.set()
        await self.go.wait()
        await super().settle(reservation_id, actual)


async def test_a_caller_cancelled_while_its_spend_is_settled_still_has_it_counted() -> None:
    store = HeldSettles()
    layer = BudgetMiddleware(BudgetOptions(limits=[{"scope": "global", "period": "total", "max_cost_usd": 1.0}]),
                             store=store)
    answer = CompletionResponse(text="ok", usage=Usage(input_tokens=1, output_tokens=1, cost_usd=0.0002),
                                provider="openai", model="m")
    call = asyncio.ensure_future(layer.handle(call_context(planned_cost_usd=PLANNED_USD), CONFIG, ScriptedNext(answer)))
    await store.waiting.wait()
    call.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await call
    store.go.set()
    for _ in range(100):  # the settle goes on in its own task
        [state] = await store.states(now=layer._clock())
        if state.reserved.cost_micro_usd == 0:
            break
        await asyncio.sleep(0)
    assert (state.spent.cost_micro_usd, state.reserved.cost_micro_usd) == (200, 0)
