"""The pools' state in the manager's state: shared where listed, closed (its pending writes written)
before the shared backend it writes through."""

from __future__ import annotations

from provmw.state import State
from provmw.stores.embedded import EmbeddedState
from provmw.stores.pools import MemoryPoolState


class Recorded(MemoryPoolState):
    def __init__(self, closed: list[str]) -> None:
        super().__init__()
        self.closed = closed

    async def aclose(self) -> None:
        self.closed.append("pools")


class Backend:
    """A shared backend serving only the pools' state, noting what closes when."""

    def __init__(self) -> None:
        self.closed: list[str] = []

    def pool_state(self) -> Recorded:
        return Recorded(self.closed)

    async def aclose(self) -> None:
        self.closed.append("backend")


async def test_the_shared_pool_state_is_closed_before_its_backend() -> None:
    backend = Backend()
    state = State(EmbeddedState(), backend, shared_concerns=("pool",))  # type: ignore[arg-type]
    state.pool_state()
    await state.aclose()
    assert backend.closed == ["pools", "backend"]


async def test_a_pool_state_never_made_is_not_closed() -> None:
    backend = Backend()
    await State(EmbeddedState(), backend, shared_concerns=("pool",)).aclose()  # type: ignore[arg-type]
    assert backend.closed == ["backend"]
