"""What ``provmw usage`` and ``provmw budget`` print: the ledger grouped, and each bucket's state."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal
from zoneinfo import ZoneInfo

from provmw.middleware.budget import BudgetLimit
from provmw.periods import window
from provmw.stores.budgets import BucketState
from provmw.stores.usage import UsageRecord

__all__ = ["GROUPS", "budget_rows", "render", "usage_rows"]

Group = Literal["day", "configuration", "model", "user", "tenant"]
GROUPS = ("day", "configuration", "model", "user", "tenant")


def _group_of(record: UsageRecord, group_by: Group, zone: ZoneInfo) -> str:
    if group_by == "day":
        return dt.datetime.fromtimestamp(record.timestamp, zone).date().isoformat()
    value = {"configuration": record.config_id, "model": f"{record.provider}/{record.model}",
             "user": record.user, "tenant": record.tenant}[group_by]
    return value if value is not None else "(none)"


def usage_rows(records: Iterable[UsageRecord], group_by: Group, zone: ZoneInfo) -> list[dict[str, Any]]:
    """One row per group: logical calls, attempts, tokens, cost, cache hits and errors."""
    rows: dict[str, dict[str, Any]] = {}
    calls: dict[str, set[str]] = {}
    for record in records:
        name = _group_of(record, group_by, zone)
        row = rows.setdefault(name, {group_by: name, "calls": 0, "attempts": 0, "input_tokens": 0,
                                     "output_tokens": 0, "cost_usd": 0.0, "cache_hits": 0, "errors": 0,
                                     "billed_unknown": 0})
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


def budget_rows(states: Sequence[BucketState], limits: Sequence[BudgetLimit], zone: ZoneInfo,
                now: float) -> list[dict[str, Any]]:
    """Each bucket of the current windows, with its limits, spend and live reservations."""
    rows = []
    for limit in limits:
        current = window(limit.period, zone, now).label
        for state in states:
            bucket = state.bucket
            if (bucket.scope, bucket.period, bucket.window) != (limit.scope, limit.period, current):
                continue
            if limit.match not in ("*", bucket.subject):
                continue
            rows.append({
                "bucket": f"{bucket.scope}:{bucket.subject}", "period": f"{bucket.period} {bucket.window}",
                "limit": _limits(limit), "spent_usd": state.spent.cost_micro_usd / 1e6,
                "reserved_usd": state.reserved.cost_micro_usd / 1e6, "tokens": state.spent.tokens,
                "requests": state.spent.requests, "resets_at": bucket.resets_at or "never"})
    return rows


def _limits(limit: BudgetLimit) -> str:
    parts = [f"${limit.max_cost_usd:g}" if limit.max_cost_usd is not None else "",
             f"{limit.max_tokens} tokens" if limit.max_tokens is not None else "",
             f"{limit.max_requests} requests" if limit.max_requests is not None else ""]
    return ", ".join(p for p in parts if p)


def render(rows: Sequence[dict[str, Any]], form: Literal["table", "csv", "json"]) -> str:
    """Rows as an aligned table, CSV or JSON."""
    if form == "json":
        return json.dumps(list(rows), indent=2) + "\n"
    if not rows:
        return "" if form == "csv" else "(nothing recorded)\n"
    columns = list(rows[0])
    if form == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()
    cells = [[_cell(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True)))
             for line in [columns, *cells]]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    return f"{value:.6f}" if isinstance(value, float) else str(value)
