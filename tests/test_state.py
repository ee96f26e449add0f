"""State composition: one place decides each concern's store, for the middleware and the CLI alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from provmw.settings import Settings
from provmw.state import State, open_state
from provmw.stores.breakers import MemoryBreakerStore
from provmw.stores.budgets import MemoryBudgetStore
from provmw.stores.budgets.blocks import BudgetBlocks
from provmw.stores.budgets.sqlite import SqliteBudgetStore
from provmw.stores.cache import MemoryCacheStore
from provmw.stores.outage import GuardedBreakers, GuardedBudgets, GuardedCache
from provmw.stores.shared import StateSettings


class Shared:
    """A shared backend that hands out memory stores and remembers what it made."""

    def __init__(self) -> None:
        self.made: list[object] = []
        self.closed = False

    def __getattr__(self, name: str) -> Any:
        kinds = {"cache_store": MemoryCacheStore, "budget_store": MemoryBudgetStore,
                 "breaker_store": MemoryBreakerStore}

        def make() -> object:
            self.made.append(store := kinds[name]())
            return store

        return make

    async def aclose(self) -> None:
        self.closed = True


def test_without_shared_state_budgets_live_in_the_settings_sqlite_file(tmp_path: Path) -> None:
    (tmp_path / "provmw.toml").write_text("")
    settings = Settings(source=str(tmp_path / "provmw.toml"), middleware={"budget": {"path": "b.db"}})
    budgets = open_state(settings).budget_store()
    assert isinstance(budgets, GuardedBudgets) and isinstance(budgets.store, BudgetBlocks)
    assert budgets.store.store.db.path == tmp_path / "b.db"


def test_budgets_at_full_or_one_call_per_block_reserve_each_call_on_its_own(tmp_path: Path) -> None:
    for options in ({"synchronous": "full"}, {"calls_per_block": 1}):
        settings = Settings(source=str(tmp_path / "provmw.toml"), middleware={"budget": {"path": "b.db", **options}})
        budgets = open_state(settings).budget_store()
        assert isinstance(budgets, GuardedBudgets) and isinstance(budgets.store, SqliteBudgetStore), options


def test_only_the_shared_concerns_come_from_the_shared_backend() -> None:
    shared = Shared()
    state = open_state(Settings(state=StateSettings("mem://x", shared=("cache",))), shared)
    cache, breakers = state.cache_store(), state.breaker_store()
    assert isinstance(cache, GuardedCache) and cache.store is shared.made[0]
    assert isinstance(breakers, MemoryBreakerStore) and len(shared.made) == 1


def test_shared_breakers_have_this_processs_own_to_fall_back_on() -> None:
    state = State(shared=Shared(), shared_concerns=("circuit_breaker",))
    breakers = state.breaker_store()
    assert isinstance(breakers, GuardedBreakers) and isinstance(breakers.local, MemoryBreakerStore)


def test_each_concern_gets_one_store() -> None:
    state = State()
    assert state.cache_store() is state.cache_store() and state.budget_store() is state.budget_store()


async def test_closing_the_state_closes_the_shared_backend() -> None:
    shared = Shared()
    await State(shared=shared).aclose()
    assert shared.closed
