"""The strategies of a pool: given the members that passed the filter and their loads, pick one.

Each is a small pure function of the pool, the candidates (in the pool's order), the view and
a random source; ties are broken at random, so equal deployments share the traffic evenly
instead of the first in the list taking it all.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from provmw.pools import Pool
from provmw.stores.pools import Load, PoolView

__all__ = ["choose", "headroom"]

Strategy = Callable[[Pool, Sequence[str], PoolView, random.Random], str]


def choose(pool: Pool, candidates: Sequence[str], view: PoolView, rng: random.Random) -> str:
    """The member of ``candidates`` (never empty) the pool's strategy picks."""
    strategy = pool.strategy
    if strategy == "affinity":
        if view.affine is not None and view.affine in candidates:
            return view.affine
        strategy = pool.then
    return _STRATEGIES[strategy](pool, candidates, view, rng)


def headroom(pool: Pool, member: str, load: Load, tokens: int) -> float | None:
    """The share of ``member``'s minute left once this call is counted (1.0: unlimited), or None
    when the call would go past its requests or tokens a minute."""
    limit = pool.limits.get(member)
    if limit is None:
        return 1.0
    rpm, tpm = limit
    share = 1.0
    if rpm is not None:
        left = rpm - load.requests - 1
        if left < 0:
            return None
        share = left / rpm if rpm else 0.0
    if tpm is not None:
        left = tpm - load.tokens - tokens
        if left < 0:
            return None
        share = min(share, left / tpm if tpm else 0.0)
    return share


def _order(pool: Pool, candidates: Sequence[str], view: PoolView, rng: random.Random) -> str:
    return candidates[0]


def _weighted(pool: Pool, candidates: Sequence[str], view: PoolView, rng: random.Random) -> str:
    weights = [float(pool.weights.get(m, 1)) for m in candidates]
    if not any(weights):
        return rng.choice(candidates)
    return rng.choices(candidates, weights)[0]


def _least_busy(pool: Pool, candidates: Sequence[str], view: PoolView, rng: random.Random) -> str:
    return _lowest(candidates, lambda m: view.loads[m].in_flight, rng)


def _latency(pool: Pool, candidates: Sequence[str], view: PoolView, rng: random.Random) -> str:
    # A deployment not measured lately is measured first, by one call (it may be the slow one, or a
    # hung one); else, now and then, one at random, so a slow one that recovered is seen to.
    # Otherwise the expected wait: latency by the calls queued, an unmeasured one as the slowest.
    loads = view.loads
    unknown = [m for m in candidates if loads[m].latency_s is None and loads[m].in_flight == 0]
    if unknown:
        return rng.choice(unknown)
    if rng.random() < pool.explore:
        return rng.choice(candidates)
    known = [latency for m in candidates if (latency := loads[m].latency_s) is not None]
    slowest = max(known, default=1.0)
    return _lowest(candidates, lambda m: (loads[m].latency_s or slowest) * (loads[m].in_flight + 1), rng)


def _headroom(pool: Pool, candidates: Sequence[str], view: PoolView, rng: random.Random) -> str:
    # The filter already dropped members without room; the most room left takes the call.
    return _lowest(candidates, lambda m: -(headroom(pool, m, view.loads[m], 0) or 0.0), rng)


def _lowest(candidates: Sequence[str], score: Callable[[str], float], rng: random.Random) -> str:
    scores = [score(m) for m in candidates]
    best = min(scores)
    tied = [m for m, s in zip(candidates, scores, strict=True) if s == best]
    return tied[0] if len(tied) == 1 else rng.choice(tied)


_STRATEGIES: Mapping[str, Strategy] = {"order": _order, "weighted": _weighted, "least_busy": _least_busy,
                                       "latency": _latency, "headroom": _headroom}
