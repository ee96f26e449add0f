"""The budget layer, pinned where the mutation run found it unchecked (docs/testing.md)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import attrs
import pytest

from provmw.config import ProviderConfig
from provmw.context import AttemptMeter, attempt_meters
from provmw.errors import BudgetExceededError, ConfigurationError, StructuredOutputError
from provmw.manager import ServiceManager
from provmw.middleware.budget import BudgetLimit, BudgetMiddleware, BudgetOptions
from provmw.plugins import PluginHost
from provmw.responses import ChatChunk, CompletionResponse, Usage
from provmw.settings import Settings
from provmw.stores.budgets import Amounts, BucketState, Charge, MemoryBudgetStore, Refusal
from provmw.streams import OpenedStream, open_stream
from provmw.testing import FakeClock, FakeProvider, ScriptedNext, call_context
from tests.conftest import openai_config

CONFIG = ProviderConfig(identifier="oa", provider="openai", model="gpt-test")
GLOBAL = {"scope": "global", "period": "total", "max_cost_usd": 1.0}
# The fake answers "echo: ...", which this pattern refuses: the call gets its one repair turn.
UNANSWERABLE = {"type": "object", "properties": {"city": {"type": "string", "pattern": "^[A-Z]+$"}},
                "required": ["city"]}


def budget(*limits: dict[str, Any], **options: Any) -> BudgetMiddleware:
    return BudgetMiddleware(BudgetOptions(limits=list(limits), **options), store=MemoryBudgetStore(),
                            wall_clock=FakeClock(1_000.0))


async def bucket(middleware: BudgetMiddleware) -> BucketState:
    [state] = await middleware.store.states(now=1_000.0)
    return state


async def served_below(config: ProviderConfig) -> OpenedStream:
    """A layer below the budget that answers with a stream of its own, no provider attempt made."""
    async def chunks() -> AsyncIterator[ChatChunk]:
        yield ChatChunk(text="hi")
        yield ChatChunk(finish_reason="stop", usage=Usage(input_tokens=7, output_tokens=3, cost_usd=0.002))

    return await open_stream(chunks(), provider="openai", model="gpt-test", served_by=config.identifier,
                             first_chunk_s=5.0, idle_s=5.0, price=None, estimated_input_tokens=7,
                             max_output_tokens=20, scrub=lambda exc: None)


async def test_a_stream_answered_below_the_budget_is_settled_at_the_usage_of_its_end() -> None:
    middleware = budget(GLOBAL)
    opened = await middleware.handle(call_context(planned_cost_usd=0.01, estimated_input_tokens=7,
                                                  max_output_tokens=20), CONFIG, served_below)
    assert isinstance(opened, OpenedStream) and (await bucket(middleware)).reserved.cost_micro_usd == 10_000
    [chunk async for chunk in opened.chunks()]
    assert ((await bucket(middleware)).spent, (await bucket(middleware)).reserved) == (Amounts(2_000, 10, 1), Amounts())


def cents(cost_usd: float) -> Usage:
    return Usage(input_tokens=5, output_tokens=5, cost_usd=cost_usd)


def answer(config: ProviderConfig) -> CompletionResponse:
    return CompletionResponse(provider=config.provider, model=config.model, served_by=config.identifier, text="ok")


async def test_a_first_refusal_is_no_further_attempt_and_names_the_strict_worst_case() -> None:
    middleware = budget({"scope": "global", "period": "total", "max_cost_usd": 0.005})
    with pytest.raises(BudgetExceededError) as refused:
        await middleware.handle(call_context(planned_cost_usd=0.01, max_output_tokens=20), CONFIG, ScriptedNext())
    error = refused.value
    assert (error.further_attempt, error.needed, error.set_by) == (False, 0.01, "oa")
    assert error.reason is not None and error.reason.startswith("the most expensive configuration")


async def test_a_refused_further_attempt_says_it_is_one_and_what_it_needed() -> None:
    middleware = budget({"scope": "global", "period": "total", "max_cost_usd": 0.015})

    async def retried(config: ProviderConfig) -> CompletionResponse:
        [meter] = attempt_meters()
        await meter.sending(config)
        await meter.ended(config, "unknown", None)  # the first attempt's usage is unknown: its reservation
        await meter.sending(config)  # a retry: another 0.01 does not fit in 0.015
        return answer(config)

    with pytest.raises(BudgetExceededError) as refused:
        await middleware.handle(call_context(planned_cost_usd=0.01, max_output_tokens=20), CONFIG, retried)
    assert (refused.value.further_attempt, refused.value.needed) == (True, 0.01)
    assert (await bucket(middleware)).spent.cost_micro_usd == 10_000


async def test_an_attempt_still_open_when_the_call_returns_is_settled_once_it_ends() -> None:
    middleware = budget(GLOBAL)
    meters: list[AttemptMeter] = []

    async def hedged(config: ProviderConfig) -> CompletionResponse:
        [meter] = meters[:] = attempt_meters()
        await meter.sending(config)
        await meter.sending(config)  # a second attempt at once, still open when the first answers
        await meter.ended(config, "yes", cents(0.002))
        return answer(config)

    await middleware.handle(call_context(planned_cost_usd=0.01, max_output_tokens=20), CONFIG, hedged)
    await meters[0].ended(CONFIG, "yes", cents(0.003))
    assert (await bucket(middleware)).spent == Amounts(5_000, 20, 1)


async def test_after_a_refused_attempt_each_further_attempt_still_reserves_its_own() -> None:
    middleware = budget({"scope": "global", "period": "total", "max_cost_usd": 0.025})
    outcomes: list[str] = []

    async def carries_on(config: ProviderConfig) -> CompletionResponse:
        [meter] = attempt_meters()
        for _ in range(4):  # a layer that tries again after a refusal (two attempts fit in 0.025)
            try:
                await meter.sending(config)
            except BudgetExceededError:
                outcomes.append("refused")
            else:
                outcomes.append("sent")
                await meter.ended(config, "unknown", None)
        return answer(config)

    await middleware.handle(call_context(planned_cost_usd=0.01, max_output_tokens=20), CONFIG, carries_on)
    assert outcomes == ["sent", "sent", "refused", "refused"]


def strict_call() -> Any:
    """A call that reserves 0.01 USD and 30 tokens (10 input, 20 output)."""
    return call_context(planned_cost_usd=0.01, estimated_input_tokens=10, max_output_tokens=20)


async def test_usage_exactly_at_the_reservation_is_settled_without_an_error_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    middleware = budget({"scope": "global", "period": "total", "max_cost_usd": 1.0, "max_tokens": 1_000})
    at_the_bound = Usage(input_tokens=10, output_tokens=20, cost_usd=0.01)
    await middleware.handle(strict_call(), CONFIG, ScriptedNext(attrs.evolve(answer(CONFIG), usage=at_the_bound)))
    assert (await bucket(middleware)).spent == Amounts(10_000, 30, 1)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_usage_of_zero_tokens_is_settled_without_an_error_logged(caplog: pytest.LogCaptureFixture) -> None:
    middleware = budget(GLOBAL)
    await middleware.handle(strict_call(), CONFIG, ScriptedNext(attrs.evolve(answer(CONFIG), usage=Usage())))
    assert (await bucket(middleware)).spent == Amounts(0, 0, 1)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_an_attempt_whose_usage_is_unknown_costs_its_reservation_in_every_dimension() -> None:
    middleware = budget(GLOBAL)

    async def unknown(config: ProviderConfig) -> CompletionResponse:
        [meter] = attempt_meters()
        await meter.sending(config)
        await meter.ended(config, "unknown", None)  # sent, and its usage never came (a timeout)
        return answer(config)

    await middleware.handle(strict_call(), CONFIG, unknown)
    assert (await bucket(middleware)).spent == Amounts(10_000, 30, 1)


async def test_float_noise_below_a_thousandth_of_a_micro_dollar_is_not_rounded_up() -> None:
    middleware = budget(GLOBAL)
    noisy = Usage(input_tokens=5, output_tokens=5, cost_usd=3.0004e-6)
    await middleware.handle(strict_call(), CONFIG, ScriptedNext(attrs.evolve(answer(CONFIG), usage=noisy)))
    assert (await bucket(middleware)).spent.cost_micro_usd == 3


class SettleFails(MemoryBudgetStore):
    async def settle(self, reservation_id: str, actual: Amounts) -> None:
        raise RuntimeError("the store went away")


async def test_a_settle_that_fails_is_raised_to_the_layer_that_guards_the_store() -> None:
    middleware = BudgetMiddleware(BudgetOptions(limits=[GLOBAL]), store=SettleFails(), wall_clock=FakeClock(1_000.0))
    with pytest.raises(RuntimeError, match="the store went away"):  # provmw.stores.outage logs and keeps it
        await middleware.handle(strict_call(), CONFIG, ScriptedNext())


class SecondReserveFails(MemoryBudgetStore):
    async def reserve(self, reservation_id: str, charges: Any, *, now: float, lease_s: float) -> Any:
        if await self.states(now=now):  # a bucket exists: this is the call's further attempt
            raise RuntimeError("the store went away")
        return await super().reserve(reservation_id, charges, now=now, lease_s=lease_s)


async def test_a_further_attempt_whose_reservation_failed_leaves_the_first_settled() -> None:
    store = SecondReserveFails()
    middleware = BudgetMiddleware(BudgetOptions(limits=[GLOBAL]), store=store, wall_clock=FakeClock(1_000.0))

    async def retried(config: ProviderConfig) -> CompletionResponse:
        [meter] = attempt_meters()
        await meter.sending(config)
        await meter.ended(config, "no", None)  # never sent
        await meter.sending(config)  # the store fails to reserve the retry
        return answer(config)

    with pytest.raises(RuntimeError, match="the store went away"):
        await middleware.handle(strict_call(), CONFIG, retried)
    [state] = await store.states(now=1_000.0)
    assert (state.spent, state.reserved) == (Amounts(), Amounts())


async def test_a_strict_cost_limit_on_a_call_without_a_worst_case_says_what_to_add() -> None:
    middleware = budget(GLOBAL)
    with pytest.raises(ConfigurationError) as refused:
        await middleware.handle(call_context(planned_cost_usd=None, max_output_tokens=20), CONFIG, ScriptedNext())
    assert str(refused.value) == (
        "budget: the worst-case cost of a call on 'oa' is unknown (a configuration in its chain has no price, or none "
        "for a unit it bills, or the call sets no max_tokens and the model's ceiling is unknown); strict cost limits "
        "need it: add [configurations.<name>.price] (with max_output_tokens, or its units) or options.max_tokens")


@pytest.mark.parametrize("limit", [{"max_cost_usd": 1.0}, {"max_tokens": 1000}])
async def test_a_strict_limit_on_a_call_whose_worst_case_cannot_be_known_names_why(limit: dict[str, float]) -> None:
    middleware = budget({"scope": "global", "period": "total", **limit})
    ctx = call_context(planned_cost_usd=1.0, max_output_tokens=20, unknown_worst_case="it continues a conversation")
    with pytest.raises(ConfigurationError) as refused:
        await middleware.handle(ctx, CONFIG, ScriptedNext())
    assert str(refused.value) == ("budget: the worst case of a call on 'oa' cannot be known before it is sent: "
                                  "it continues a conversation")


async def test_a_further_attempt_is_not_counted_as_another_request() -> None:
    middleware = budget({"scope": "global", "period": "total", "max_requests": 1})

    async def retried(config: ProviderConfig) -> CompletionResponse:
        [meter] = attempt_meters()
        for _ in range(2):  # the retry reserves the call's cost again, not a second request
            await meter.sending(config)
            await meter.ended(config, "unknown", None)
        return answer(config)

    await middleware.handle(strict_call(), CONFIG, retried)
    assert (await bucket(middleware)).spent.requests == 1


def test_limits_that_are_not_a_list_are_refused_naming_the_table() -> None:
    with pytest.raises(ConfigurationError) as refused:
        BudgetOptions(limits="global")  # type: ignore[arg-type]
    assert str(refused.value) == "limits must be a list of tables ([[middleware.budget.limits]]), got 'global'"


def test_a_budget_layer_given_no_store_keeps_its_own_in_memory() -> None:
    assert isinstance(BudgetMiddleware(BudgetOptions()).store, MemoryBudgetStore)


def test_a_worst_case_asked_without_limits_checks_the_layers_own() -> None:
    with pytest.raises(ConfigurationError, match="strict cost limits need it"):
        budget(GLOBAL).worst_case(call_context(planned_cost_usd=None, max_output_tokens=20), CONFIG)


class TokensAsked(MemoryBudgetStore):
    """A memory store that notes the tokens each reservation asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    async def reserve(self, reservation_id: str, charges: Sequence[Charge], *, now: float,
                      lease_s: float) -> Refusal | None:
        self.asked.append(charges[0].amount.tokens)
        return await super().reserve(reservation_id, charges, now=now, lease_s=lease_s)


async def test_a_repair_turn_reserves_its_larger_token_worst_case_under_a_configuration_limit(
        fake: FakeProvider, builtin_only: PluginHost) -> None:
    store = TokensAsked()
    limit = BudgetLimit(scope="configuration", max_tokens=100_000)
    budget_layer = BudgetMiddleware(BudgetOptions(mode="strict", limits=(limit,)), store=store)
    budget_layer.name = "probe"  # beside the built-in one, which has no limits here
    settings = Settings(configurations={"oa": openai_config(fake)}, default="oa")
    async with ServiceManager(settings, host=builtin_only, middleware=[budget_layer]) as manager:
        with pytest.raises(StructuredOutputError):  # the repaired answer still breaks the schema
            await manager.chat("Paris " * 50, response_schema=UNANSWERABLE, max_tokens=100)
    first, repair = store.asked
    assert repair > first
