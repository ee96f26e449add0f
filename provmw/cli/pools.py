"""What the command line says about deployment pools (ADR 0051): each pool, its strategy and its
deployments for ``provmw stack`` and ``provmw check``, what ``check`` finds wrong with one, and
``provmw usage --group-by pool``.

The ledger names the deployment that served each attempt (``config_id``), never the pool: a pool
is a name over deployments, and a deployment may serve several pools. So the report maps each
record to the pools the settings list its deployment in *now*, when the report runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from zoneinfo import ZoneInfo

import attrs

from provmw.pools import POOL_PROVIDER, Pool
from provmw.settings import Settings
from provmw.stores.usage import UsageRecord
from provmw.stores.usage.summary import NO_VALUE, usage_rows

__all__ = ["POOL_GROUP", "inactive_pools", "is_pool", "member_of", "pool_lines", "pool_rows", "strategy_text"]

POOL_GROUP = "pool"  # what ``provmw usage --group-by`` calls it


def pool_lines(settings: Settings) -> list[str]:
    """Each pool (its strategy, fallbacks and deployments, one a line) and each alias; nothing
    when the settings declare neither."""
    lines = [line for pool in settings.pools.values() for line in _pool(pool, settings.configurations)]
    lines += [f"alias {alias} -> {target}" for alias, target in settings.aliases.items()]
    return lines


def _pool(pool: Pool, configurations: Mapping[str, Any]) -> Iterator[str]:
    falls = f"; falls back to {' -> '.join(pool.fallbacks)}" if pool.fallbacks else ""
    yield f"pool {pool.name}: {strategy_text(pool)}{falls}"
    width = max(map(len, pool.members))
    for member in pool.members:
        config = configurations[member]
        extras = [*_limits(pool, member), *([] if config.active else ["inactive"])]
        yield f"  {member:<{width}}  {config.provider} {config.model}{'  ' + ', '.join(extras) if extras else ''}"


def strategy_text(pool: Pool) -> str:
    """The strategy in words, with the settings it reads: ``affinity by session, user (then least_busy)``."""
    if pool.strategy == "affinity":
        return f"affinity by {', '.join(pool.affinity)} (then {pool.then}; a key kept {pool.affinity_ttl_s:g} s)"
    if pool.strategy == "latency":
        return f"latency ({pool.explore:.0%} explored at random)"
    return pool.strategy


def _limits(pool: Pool, member: str) -> Iterator[str]:
    if pool.strategy == "weighted":
        yield f"weight {pool.weights.get(member, 1):g}"
    for table in ("rpm", "tpm"):
        if member in getattr(pool, table):
            yield f"{table} {getattr(pool, table)[member]:g}"


def inactive_pools(settings: Settings) -> Iterator[str]:
    """One line per pool whose deployments are all inactive: it has none to send a call to."""
    for pool in settings.pools.values():
        if not any(settings.configurations[m].active for m in pool.members):
            yield (f"{settings.source}: [pools.{pool.name}] members: every deployment is inactive "
                   f"({', '.join(pool.members)}: active = false); activate one, or take the pool out")


def member_of(settings: Settings, identifier: str) -> list[str]:
    """The pools that list the configuration ``identifier`` among their deployments."""
    return [pool.name for pool in settings.pools.values() if identifier in pool.members]


def pool_rows(records: Iterable[UsageRecord], settings: Settings, zone: ZoneInfo) -> list[dict[str, Any]]:
    """The ledger grouped by pool: each record counted in every pool its deployment belongs to
    (per the settings now), a record of no pool's deployment under ``(none)``."""
    pools: dict[str, list[str]] = {}
    for pool in settings.pools.values():
        for member in pool.members:
            pools.setdefault(member, []).append(pool.name)
    as_pools = (attrs.evolve(r, config_id=name) for r in records for name in pools.get(r.config_id, [NO_VALUE]))
    return [{POOL_GROUP: row.pop("configuration"), **row} for row in usage_rows(as_pools, "configuration", zone)]


def is_pool(config: Any) -> bool:
    """Whether ``config`` is a pool's own configuration (no adapter serves it, it has no price)."""
    return bool(getattr(config, "provider", None) == POOL_PROVIDER)
