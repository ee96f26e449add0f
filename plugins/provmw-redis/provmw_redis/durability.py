"""Whether a Redis server keeps budget spend across its own restart.

A budget on Redis needs persistence: a server that restarts with neither the append-only file
(``appendonly yes``) nor a snapshot rule (``save``) comes back empty, every bucket's spend and
every reservation forgotten, so the limits start over mid-period. ``appendonly yes`` (with
``appendfsync everysec``, Redis's default for it) loses at most about a second of settles to a
crash; snapshots alone lose what was settled since the last one. The budget store logs a
warning when it first reaches a server without either, and ``provmw check`` lists it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import redis.exceptions

if TYPE_CHECKING:
    from provmw_redis.backend import RedisState

__all__ = ["forgets_on_restart"]


async def forgets_on_restart(state: RedisState) -> str | None:
    """Why a restart of the server would forget budget spend, or None when it keeps it. Raises
    ``RedisUnavailableError`` when the server cannot be reached."""
    try:
        appendonly = await state.run(lambda: state.client.config_get("appendonly"))
        save = await state.run(lambda: state.client.config_get("save"))
    except redis.exceptions.ResponseError as exc:  # CONFIG renamed or refused, as managed services do
        return (f"redis state {state.shown_url}: its persistence settings cannot be read (CONFIG GET: {exc}); "
                "a budget on Redis needs appendonly yes (or a save rule), or a restart forgets its spend")
    if _text(appendonly.get("appendonly")) == "yes" or _text(save.get("save")).strip():
        return None
    return (f"redis state {state.shown_url}: appendonly is no and no save rule is set, so a restart of Redis "
            "forgets every budget's spend and the limits start over; a budget on Redis needs persistence "
            "(appendonly yes)")


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")
