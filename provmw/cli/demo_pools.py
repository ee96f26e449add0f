"""The demo's pool step: three deployments of one model behind one name, sessions kept on theirs,
and the fallback chain taking over once the pool has no deployment free (ADR 0051).

The three deployments are configurations on the same loopback fake provider, asking the same
model; only the ledger and ``response.served_by`` tell them apart, as they would three regions.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from provmw.cli.pools import strategy_text
from provmw.config import ProviderConfig
from provmw.middleware.pool import PoolMiddleware
from provmw.pools import Pool
from provmw.testing import FakeProvider, Fault

if TYPE_CHECKING:
    from provmw.cli.demo import _Story

__all__ = ["POOL", "POOL_MODEL", "pool_settings", "tell_pool"]

POOL = "team-chat"
POOL_MODEL = "pooled-model"
_DEPLOYMENTS = ("east", "west", "north")
_SESSIONS = ("alice", "bob")
_TURNS = 3
_COOL_DOWN_S = 30  # the 429s' retry-after: long enough that no deployment is back before the story ends


def pool_settings(fake: FakeProvider, fallback: str) -> tuple[dict[str, ProviderConfig], Pool]:
    """The deployments (``team-chat/east``, ... as inline ones are named) and the pool over them,
    keyed by the ``session`` control and falling back to ``fallback``."""
    deployments = {f"{POOL}/{name}": ProviderConfig(
        identifier=f"{POOL}/{name}", provider="openai", model=POOL_MODEL, base_url=fake.openai_base_url,
        api_key="sk-demo-not-a-real-key", price={"input_usd_per_mtok": 0.15, "output_usd_per_mtok": 0.60,
                                                 "max_output_tokens": 4096}) for name in _DEPLOYMENTS}
    pool = Pool(name=POOL, members=tuple(deployments), strategy="affinity", affinity=("session",),
                fallbacks=(fallback,))
    return deployments, pool


async def tell_pool(story: _Story) -> None:
    """Two sessions' turns, each served by its session's deployment; then 429s cooling every
    deployment down until the pool is unavailable and the fallback answers."""
    m = story.manager
    pool = m.settings.pools[POOL]
    story.say(f"   pool {POOL!r}: {', '.join(pool.members)} (one model, three deployments);")
    story.say(f"   {strategy_text(pool)}; falls back to {', '.join(pool.fallbacks)}")
    served: dict[str, set[str]] = {session: set() for session in _SESSIONS}
    for turn in range(1, _TURNS + 1):
        for session in _SESSIONS:
            response = await m.chat(f"{session}, turn {turn}", configuration=POOL, controls={"session": session})
            served[session].add(response.served_by)
            story.say(f"   session={session:<5} turn {turn} -> served_by={response.served_by}")
    story.say(f"   each session stayed on one deployment: {_kept(served)}")
    await _until_unavailable(story)


def _kept(served: Mapping[str, set[str]]) -> str:
    return ", ".join(f"{session} on {' and '.join(sorted(names))}" for session, names in served.items())


async def _until_unavailable(story: _Story) -> None:
    pool = story.manager.settings.pools[POOL]
    story.say(f"   now every deployment answers 429 with retry-after: {_COOL_DOWN_S}, which cools it down for "
              f"{_COOL_DOWN_S} s;")
    story.say("   a call a deployment answers 429 moves to the next at once; none left, the fallback answers:")
    story.fake.script(*[Fault(status=429, headers={"retry-after": str(_COOL_DOWN_S)})] * len(pool.members),
                      model=POOL_MODEL)
    for call in range(1, len(pool.members) + 2):
        before = story.fake.count(model=POOL_MODEL)
        await story.call(functools.partial(story.manager.chat, f"question {call}", configuration=POOL,
                                           controls={"session": "alice"}))
        cooling = await _cooling(story, pool)
        if story.fake.count(model=POOL_MODEL) == before and len(cooling) == len(pool.members):
            story.say(f"      requests sent to the pool for it: 0: all {len(cooling)} deployments cool down "
                      f"(for {min(cooling):.0f} s more),")
            story.say("      so the pool is unavailable (PoolUnavailableError) and the fallback chain moves on at once")
            break
    story.fake.clear_faults()


async def _cooling(story: _Story, pool: Pool) -> list[float]:
    """How long each deployment of ``pool`` still cools down, as the pool layer sees it."""
    layer = next(m for m in story.manager.pipeline.middlewares if isinstance(m, PoolMiddleware))
    now = time.time()
    view = await layer.state.read(pool.name, pool.members, None, now)
    return [view.loads[m].cooldown_until - now for m in pool.members if view.loads[m].cooldown_until > now]
