"""Whether a Redis server keeps budget spend across its own restart.

A budget on Redis needs persistence: a server that restarts with neither the append-only file
(``appendonly yes``) nor a snapshot rule (``save``) comes back empty, every bucket's spend and
every reservation forgotten, so the limits start over mid-period. ``appendonly yes`` (with
``appendfsync everysec``, Redis's default for it) loses at most about a second of settles to a
crash; snapshots alone lose what was settled since the last one. A server that may evict keys
(a ``maxmemory`` with a policy other than ``noeviction``) drops a bucket, a reservation or a
virtual key's budget limit when it runs short of memory, silently. The budget store logs a
warning when it first reaches a server that would forget so, and ``provmw check`` lists it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import redis.exceptions

if TYPE_CHECKING:
    from provmw_redis.backend import RedisState

__all__ = ["forgets_spend"]


async def forgets_spend(state: RedisState) -> str | None:
    """Why the server would forget budget spend (on a restart, or by evicting keys), or None when it
    keeps it. Raises ``RedisUnavailableError`` when the server cannot be reached."""
    try:
        appendonly = await state.run(lambda: state.client.config_get("appendonly"))
        save = await state.run(lambda: state.client.config_get("save"))
        memory = await state.run(lambda: state.client.config_get("maxmemory*"))
    except redis.exceptions.ResponseError as exc:  # CONFIG renamed or refused, as managed services do
        return (f"redis state {state.shown_url}: its persistence settings cannot be read (CONFIG GET: {exc}); "
                "a budget on Redis needs appendonly yes (or a save rule) and maxmemory-policy noeviction, or it "
                "forgets its spend")
    if not (_text(appendonly.get("appendonly")) == "yes" or _text(save.get("save")).strip()):
        return (f"redis state {state.shown_url}: appendonly is no and no save rule is set, so a restart of Redis "
                "forgets every budget's spend and the limits start over; a budget on Redis needs persistence "
                "(appendonly yes)")
    policy = _text(memory.get("maxmemory-policy"))
    if _text(memory.get("maxmemory")) in ("", "0") or policy == "noeviction":
        return None
    return (f"redis state {state.shown_url}: maxmemory-policy is {policy}, so Redis short of memory evicts budget "
            "buckets, reservations and key budget limits without an error and the limits no longer hold; a budget "
            "on Redis needs maxmemory-policy noeviction (or no maxmemory)")


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")
