"""What ``provmw usage`` and ``provmw budget`` print: the ledger grouped, and each bucket's state."""

from __future__ import annotations

import csv
import io
import json
import textwrap
from collections.abc import Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, cast
from zoneinfo import ZoneInfo

from provmw._base.periods import window
from provmw.cli.pools import POOL_GROUP, pool_rows
from provmw.middleware.budget import BudgetLimit
from provmw.settings import Settings
from provmw.stores.budgets import BucketState
from provmw.stores.usage.summary import GROUPS, Group, usage_rows

if TYPE_CHECKING:
    from provmw.state import State

__all__ = ["GROUPS", "USAGE_COLUMNS", "budget_rows", "budget_table", "ledger_rows", "plain", "render", "usage_help",
           "usage_rows", "usd"]


# What each column of ``provmw usage`` counts, for its --help and the guide (a test holds both to it).
USAGE_COLUMNS = {
    "calls": "logical calls: one per chat() or embed(), however many attempts it took",
    "attempts": "attempts made at a provider, each retry and fallback counted (a cache hit is none)",
    "input_tokens": "input tokens the providers reported (estimated for a stream cut short)",
    "output_tokens": "output tokens, counted the same way",
    "cost_usd": "what those tokens cost at the configured prices, summed, then rounded to the micro-dollar",
    "cache_hits": "calls the cache answered: nothing sent, cost 0",
    "errors": "attempts that ended in an error (a refusal status, a timeout, a cut connection)",
    "billed_unknown": "attempts sent whose usage never came back (a timeout, a cut connection, an error event "
                      "inside an HTTP 200 stream, a body that does not parse), or answered by a model without "
                      "a price (cost unknown): the provider may have billed them, so the real cost can be "
                      "higher than cost_usd, and a strict budget counts each at its reservation",
}


# --group-by pool: the ledger names deployments, so the pools are the settings' at report time.
_POOL_NOTE = ("", "--group-by pool counts each record under every pool the settings list its deployment in now",
              "(a deployment in two pools counts in both; one removed from its pool counts under (none)).")


def usage_help() -> str:
    """The --help epilog of ``provmw usage``: one line per column."""
    width = max(map(len, USAGE_COLUMNS))
    lines = [textwrap.fill(meaning, 96, initial_indent=f"  {name:<{width}}  ", subsequent_indent=" " * (width + 4))
             for name, meaning in USAGE_COLUMNS.items()]
    return "\n".join(["columns (the first is the group; (none) holds records without a user, tenant, key or team",
                      "(a direct call, not through the gateway, has no key nor team), or, by pool, of a",
                      "configuration in no pool):", *lines, *_POOL_NOTE])


async def ledger_rows(settings: Settings, group_by: str, zone: ZoneInfo, since: float | None,
                      state: State) -> list[dict[str, Any]]:
    """The ledger grouped as ``provmw usage`` prints it; by pool from its records, each deployment
    under the pools the settings list it in."""
    store = state.usage_journal().store
    if group_by == POOL_GROUP:
        return pool_rows(await store.records(since), settings, zone)
    rows: list[dict[str, Any]] = await store.summary(cast(Group, group_by), zone, since)
    return rows


def budget_rows(states: Sequence[BucketState], limits: Sequence[BudgetLimit], zone: ZoneInfo,
                now: float) -> list[dict[str, Any]]:
    """Each bucket of the current windows, with its limits, spend and live reservations.

    Values are data (numbers, ``None`` for no limit or no reset, ISO dates and times), as
    ``--format json`` and ``csv`` print them; :func:`budget_table` turns a row into words.
    """
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
                "scope": bucket.scope, "subject": bucket.subject, "period": bucket.period, "window": bucket.window,
                "max_cost_usd": limit.max_cost_usd, "max_tokens": limit.max_tokens,
                "max_requests": limit.max_requests, "spent_usd": state.spent.cost_micro_usd / 1e6,
                "reserved_usd": state.reserved.cost_micro_usd / 1e6, "tokens": state.spent.tokens,
                "requests": state.spent.requests, "resets_at": bucket.resets_at})
    return rows


def budget_table(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of :func:`budget_rows` for reading: ``global:*``, ``day 2026-11-28``, ``$1, 100 tokens``."""
    return [{"bucket": f"{row['scope']}:{row['subject']}", "period": f"{row['period']} {row['window']}",
             "limit": _limits(row), "spent_usd": row["spent_usd"], "reserved_usd": row["reserved_usd"],
             "tokens": row["tokens"], "requests": row["requests"], "resets_at": row["resets_at"] or "never"}
            for row in rows]


def _limits(row: dict[str, Any]) -> str:
    parts = [f"${row['max_cost_usd']:g}" if row["max_cost_usd"] is not None else "",
             f"{row['max_tokens']} tokens" if row["max_tokens"] is not None else "",
             f"{row['max_requests']} requests" if row["max_requests"] is not None else ""]
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
