"""What ``provmw usage`` and ``provmw budget`` print: the ledger grouped, and each bucket's state."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Literal
from zoneinfo import ZoneInfo

from provmw._base.periods import window
from provmw.middleware.budget import BudgetLimit
from provmw.stores.budgets import BucketState
from provmw.stores.usage.summary import GROUPS, usage_rows

__all__ = ["GROUPS", "budget_rows", "plain", "render", "usage_rows", "usd"]


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
    return plain(value) if isinstance(value, float) else str(value)


def plain(value: float) -> str:
    """A number for people: 6 significant digits, never in exponent form (``0.0000051``).

    Only what is printed for reading is rounded: the ledger, JSON, CSV and reprs keep the exact
    value, so sums and comparisons are never made on a rounded one.
    """
    return format(Decimal(f"{value:.6g}").normalize(), "f")


def usd(value: float) -> str:
    """Money for display: ``$0.0000051``, not ``$5.0999999999999995e-06`` nor ``$0.000005``."""
    return f"${plain(value)}"
