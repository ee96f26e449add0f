"""The ledger grouped: what ``provmw usage`` prints, one row per day, configuration, model, user, tenant,
virtual key or team.

:func:`usage_rows` is the reference grouping. A store's ``summary`` must return exactly
these rows for its records (the store contract checks it), whether it groups in Python,
as the embedded stores do, or in SQL, as a fleet's ledger in PostgreSQL does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo

if TYPE_CHECKING:
    from provmw.stores.usage import UsageRecord

__all__ = ["GROUPS", "NO_VALUE", "ROW_COLUMNS", "Group", "usage_rows"]

Group = Literal["day", "configuration", "model", "user", "tenant", "key", "team"]
GROUPS: tuple[Group, ...] = ("day", "configuration", "model", "user", "tenant", "key", "team")
# The columns after the group's own, in the order they are printed.
ROW_COLUMNS = ("calls", "attempts", "input_tokens", "output_tokens", "cost_usd", "cache_hits", "errors",
               "billed_unknown")
NO_VALUE = "(none)"  # the group of records without a user, tenant, key or team (a direct call has no key)


def _group_of(record: UsageRecord, group_by: Group, zone: ZoneInfo) -> str:
    if group_by == "day":
        return dt.datetime.fromtimestamp(record.timestamp, zone).date().isoformat()
    value = {"configuration": record.config_id, "model": f"{record.provider}/{record.model}",
             "user": record.user, "tenant": record.tenant, "key": record.key_id, "team": record.team}[group_by]
    return value if value is not None else NO_VALUE


def usage_rows(records: Iterable[UsageRecord], group_by: Group, zone: ZoneInfo) -> list[dict[str, Any]]:
    """One row per group, in code-point order of its name: logical calls, attempts, tokens, cost
    (rounded to the micro-dollar), cache hits, errors and attempts of unknown billing."""
    rows: dict[str, dict[str, Any]] = {}
    calls: dict[str, set[str]] = {}
    for record in records:
        name = _group_of(record, group_by, zone)
        row = rows.setdefault(name, {group_by: name, **dict.fromkeys(ROW_COLUMNS, 0), "cost_usd": 0.0})
        calls.setdefault(name, set()).add(record.call_id)
        hit = record.status == "cache_hit"
        row["attempts"] += not hit
        row["cache_hits"] += hit
        row["errors"] += record.status == "error"
        row["billed_unknown"] += record.billed == "unknown"
        row["input_tokens"] += record.input_tokens
        row["output_tokens"] += record.output_tokens
        row["cost_usd"] += record.cost_usd or 0.0
    for name, row in rows.items():
        row["calls"] = len(calls[name])
        row["cost_usd"] = round(row["cost_usd"], 6)
    return [rows[name] for name in sorted(rows)]
