"""``affinity`` over real HTTP: a conversation stays with its deployment while it is healthy,
moves once when it goes down, and the provider's prompt cache pays for staying (ADR 0051)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from provmw.manager import ServiceManager
from provmw.messages import Message
from provmw.plugins import PluginHost
from provmw.pools import Pool
from provmw.settings import Settings
from provmw.stores.usage import SqliteUsageStore, UsageRecord
from provmw.testing import FakeProvider, Fault
from tests.conftest import openai_config
from tests.test_pools import FAST_RETRY, MEMBERS, pooled

PRICE = {"input_usd_per_mtok": 1.0, "cached_input_usd_per_mtok": 0.1, "output_usd_per_mtok": 2.0}


async def converse(manager: ServiceManager, sessions: int, turns: int, *, concurrency: int = 64,
                   between: Callable[[int], None] = lambda turn: None) -> dict[str, list[str]]:
    """``sessions`` conversations of ``turns`` turns each, the session's turns one after another
    and ``concurrency`` sessions at a time; the deployment that served each turn, by session.
    ``between(n)`` runs once every session has had its turn ``n`` (the first is 0)."""
    served: dict[str, list[str]] = {f"s{i}": [] for i in range(sessions)}
    history: dict[str, list[Message]] = {s: [] for s in served}
    gate = asyncio.Semaphore(concurrency)

    async def turn(session: str, n: int) -> None:
        async with gate:
            history[session].append(Message.user(f"{session} asks question {n} about the weather"))
            answer = await manager.chat(list(history[session]), controls={"session": session},
                                        correlation_id=f"{session}-{n}")
        history[session].append(Message.assistant(answer.text))
        served[session].append(answer.served_by)

    for n in range(turns):
        await asyncio.gather(*(turn(s, n) for s in served))
        between(n)
    return served


async def ledger(path: Path) -> list[UsageRecord]:
    store = SqliteUsageStore(path)
    try:
        return await store.records()
    finally:
        await store.aclose()


def moves(deployments: list[str]) -> int:
    return sum(a != b for a, b in itertools.pairwise(deployments))


@pytest.mark.slow
async def test_a_thousand_sessions_of_ten_turns_stay_with_their_deployments(fake: FakeProvider,
                                                                            builtin_only: PluginHost) -> None:
    async with ServiceManager(pooled(fake, "affinity"), host=builtin_only) as manager:
        served = await converse(manager, 1_000, 10)
    at_home = sum(d == turns[0] for turns in served.values() for d in turns)
    assert at_home >= 0.99 * 10_000


async def test_sessions_of_a_deployment_that_goes_down_move_once_and_stay(fake: FakeProvider,
                                                                          builtin_only: PluginHost) -> None:
    def down_after_half(turn: int) -> None:
        if turn == 4:
            fake.fail_randomly(1.0, Fault(status=503), model="dep-a")

    async with ServiceManager(pooled(fake, "affinity"), host=builtin_only) as manager:
        served = await converse(manager, 120, 10, between=down_after_half)
    on_a = [turns for turns in served.values() if turns[0] == "a"]
    assert on_a and all(t[:5] == ["a"] * 5 and moves(t) == 1 and "a" not in t[5:] for t in on_a)
    assert all(moves(t) == 0 for t in served.values() if t[0] != "a")


async def cache_use(strategy: str, folder: Path, host: PluginHost) -> list[UsageRecord]:
    """The SQLite ledger of 40 conversations of 6 turns through a pool whose provider caches prompts."""
    async with FakeProvider(prompt_cache=True) as fake:
        configs = {m: openai_config(fake, identifier=m, model=f"dep-{m}", price=PRICE) for m in MEMBERS}
        settings = Settings(configurations=configs, default="gpt",
                            pools={"gpt": Pool(name="gpt", members=MEMBERS, strategy=strategy)},
                            middleware={**FAST_RETRY, "usage": {"path": str(folder / "ledger.sqlite3")}})
        async with ServiceManager(settings, host=host) as manager:
            await converse(manager, 40, 6, concurrency=8)
    return await ledger(folder / "ledger.sqlite3")


async def test_affinity_reads_each_conversation_from_its_deployments_prompt_cache(
        builtin_only: PluginHost, tmp_path: Path) -> None:
    records = await cache_use("affinity", tmp_path, builtin_only)
    later = [r for r in records if not r.correlation_id.endswith("-0")]
    assert len(records) == 240 and all(r.cached_input_tokens > 0 for r in later)


async def test_affinity_costs_less_than_least_busy_with_a_prompt_cache(builtin_only: PluginHost,
                                                                       tmp_path: Path) -> None:
    (tmp_path / "affinity").mkdir()
    (tmp_path / "least_busy").mkdir()
    kept = await cache_use("affinity", tmp_path / "affinity", builtin_only)
    spread = await cache_use("least_busy", tmp_path / "least_busy", builtin_only)
    assert sum(r.cached_input_tokens for r in kept) > sum(r.cached_input_tokens for r in spread)
    assert sum(r.cost_usd or 0 for r in kept) < sum(r.cost_usd or 0 for r in spread)
    assert all(r.cost_usd is not None for r in kept + spread)
