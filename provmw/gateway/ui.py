"""``GET /ui``: the gateway's read-only status page, for its operator only.

One HTML page built here from strings, every value through :func:`html.escape`, with no script
(its Content-Security-Policy allows none): the stack in order, each deployment with its pool and
its breaker's state, each budget bucket of the current windows with its fill (spent plus reserved
against its limit), the keys, and the ledger's spend by organisation, team, user, key and day.

Only an admin sees it: ``Authorization: Bearer <token>`` where the token is the value of
``PROVMW_ADMIN_TOKEN`` when the app was built (compared in constant time). No token configured:
``/ui`` answers 404, as if it did not exist. A virtual key is never an admin token.

The ledger records each gateway call's organisation (``tenant``), team, user and key (its public
id, never its secret), so spend shows by each of them whether or not a budget is set on it; a
direct call, made by a host application without a key, shows under ``(none)``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from aiohttp import web

from provmw.cli.pools import is_pool, member_of, strategy_text
from provmw.cli.reports import budget_rows, budget_table, plain, usd
from provmw.gateway.health import stack_state
from provmw.middleware import BUDGET, section_options
from provmw.stores.usage.summary import Group

if TYPE_CHECKING:
    from provmw.gateway._endpoint import Gateway
    from provmw.manager import ServiceManager
    from provmw.middleware.budget import BudgetLimit
    from provmw.stores.budgets import BucketState

__all__ = ["ADMIN_TOKEN_ENV", "SPEND_DAYS", "admin_token", "is_admin", "status_page"]

log = logging.getLogger("provmw.gateway")

ADMIN_TOKEN_ENV = "PROVMW_ADMIN_TOKEN"
SPEND_DAYS = 31  # the ledger's spend shown: the last 31 days, so a page view never reads all history
KEYS_SHOWN = 500
SECTION_TIMEOUT_S = 5.0  # a store that hangs (a network partition) leaves its section unread, not the page
# The page runs no script and loads nothing: even a value that escaped escaping could not act.
HEADERS = {"content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
           "cache-control": "no-store", "x-content-type-options": "nosniff", "referrer-policy": "no-referrer"}
SPEND_GROUPS: tuple[tuple[Group, str], ...] = (("tenant", "organisation"), ("team", "team"), ("user", "user"),
                                               ("key", "key"), ("day", "day"))
SPEND_COLUMNS = ("calls", "attempts", "input_tokens", "output_tokens", "cost_usd", "errors", "billed_unknown")
STYLE = """body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left}td.n{text-align:right}th{background:#f3f3f3}
.bar{display:inline-block;width:8em;height:.8em;background:#eee;vertical-align:middle;margin-right:.4em}
.bar span{display:block;height:100%;background:#4a7}.bar.full span{background:#c44}.note{color:#666}"""


class Html(str):
    """Text already escaped (built here from escaped parts): written into the page as it is."""


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def status_page(gateway: Gateway, environ: Mapping[str, str] | None = None) -> Handler:
    """The ``GET /ui`` handler for ``gateway``, guarded by ``PROVMW_ADMIN_TOKEN`` from ``environ``."""
    expected = admin_token(environ)

    async def page(request: web.Request) -> web.StreamResponse:
        if expected is None:
            raise web.HTTPNotFound()
        if not is_admin(request, expected):
            return web.Response(status=401, text="the status page needs 'Authorization: Bearer <admin token>'",
                                headers={"www-authenticate": 'Bearer realm="provmw admin"'})
        return web.Response(text=await render_page(gateway), content_type="text/html", headers=HEADERS)

    return page


def admin_token(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The operator's token from ``PROVMW_ADMIN_TOKEN`` (None: not set)."""
    token = (os.environ if environ is None else environ).get(ADMIN_TOKEN_ENV, "").strip()
    return token.encode() if token else None


def is_admin(request: web.Request, expected: bytes) -> bool:
    """Whether ``request`` carries the admin token (a virtual key never is one), compared in constant time."""
    header = request.headers.get("authorization", "")
    if header[:7].lower() != "bearer ":
        return False
    return hmac.compare_digest(header[7:].strip().encode("utf-8", "surrogateescape"), expected)


async def render_page(gateway: Gateway) -> str:
    """The whole page, each section read now; a section whose store does not answer says so."""
    manager, now = gateway.manager, time.time()
    zone = ZoneInfo(section_options(manager.settings, BUDGET).timezone)
    sections = [
        ("stack", "Stack", _stack(manager)),
        ("deployments", "Deployments, pools and breakers", _deployments(manager)),
        ("budgets", "Budgets (current windows)", _budgets(gateway, zone, now)),
        ("spend", f"Spend in the last {SPEND_DAYS} days (the ledger)", _spend(manager, zone, now)),
        ("keys", "Keys", _keys(gateway, zone)),
    ]
    body = [f"<h1>provmw gateway</h1><p class=note>Read-only; as of {_when(now, zone)}.</p>"]
    for anchor, title, content in sections:
        body.append(f'<section id="{anchor}"><h2>{escape(title)}</h2>{await _guarded(anchor, content)}</section>')
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>provmw gateway status</title>"
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>")


async def _guarded(anchor: str, content: Awaitable[str]) -> str:
    try:
        return await asyncio.wait_for(content, SECTION_TIMEOUT_S)
    except Exception as exc:  # a store out (Redis, PostgreSQL) leaves its section, not the page, unreadable
        log.warning("status page: %s unavailable: %s", anchor, type(exc).__name__)
        return f"<p class=note>Unavailable: the store did not answer ({escape(type(exc).__name__)}).</p>"


async def _stack(manager: ServiceManager) -> str:
    if not manager.stack:
        return "<p>No middleware: calls go straight to the provider.</p>"
    return table("stack-layers", ("priority", "layer", "plugin"),
                 [(entry.priority, entry.name, entry.plugin) for entry in manager.stack])


async def _deployments(manager: ServiceManager) -> str:
    settings, stack = manager.settings, await stack_state(manager)  # what /metrics shows, read the same way
    unread = "unknown" if "circuit_breaker" in _layers(manager) else "off"
    breakers = {gauge.configuration: gauge.state.value for gauge in stack.breakers}
    rows = [(name, config.provider, config.model, ", ".join(member_of(settings, name)) or "-",
             "yes" if config.active else "no", breakers.get(name, unread))
            for name, config in settings.configurations.items() if not is_pool(config)]
    parts = [table("deployment-states", ("deployment", "provider", "model", "pools", "active", "breaker"), rows)]
    if settings.pools:
        parts.append(table("pools", ("pool", "strategy", "deployments", "falls back to"),
                           [(p.name, strategy_text(p), ", ".join(p.members), " -> ".join(p.fallbacks) or "-")
                            for p in settings.pools.values()]))
        parts.append(table("pool-loads", ("pool", "deployment", "calls in flight", "cooling down for (s)"),
                           [(g.pool, g.deployment, g.in_flight, round(g.cooldown_s, 1)) for g in stack.pools]))
    if settings.aliases:
        parts.append(table("aliases", ("alias", "target"), list(settings.aliases.items())))
    return "".join(parts)


async def _budgets(gateway: Gateway, zone: ZoneInfo, now: float) -> str:
    manager = gateway.manager
    if "budget" not in _layers(manager):
        return "<p>The budget layer is off.</p>"
    configured = section_options(manager.settings, BUDGET).limits
    keyed, note = await _key_limits(gateway)
    states = await manager.state.budget_store().states(now=now)
    rows = budget_rows(states, tuple(dict.fromkeys((*configured, *keyed))), zone, now)
    note += "<p class=note>Fill is spent plus reserved against the limit, the fullest dimension.</p>"
    if not rows:
        return "<p>No bucket has been drawn on in the current windows.</p>" + note
    return _budget_table(rows, states) + note


async def _key_limits(gateway: Gateway) -> tuple[list[BudgetLimit], str]:
    """The key store's limits (keys', teams', organisations'), through the server's short-lived cache;
    none, and a note saying why, while the store does not answer (the configured ones still show)."""
    found: list[BudgetLimit] = []
    try:
        for record in await gateway.keys.list():
            found += await gateway.cache.budgets_for(record)
    except Exception as exc:
        log.warning("status page: the key store did not answer: %s", type(exc).__name__)
        return [], (f"<p class=note>The key store did not answer ({escape(type(exc).__name__)}): the key, team "
                    "and organisation budgets it holds are not shown.</p>")
    return found, ""


def _budget_table(rows: Sequence[dict[str, Any]], states: Iterable[BucketState]) -> str:
    held = {(s.bucket.scope, s.bucket.subject, s.bucket.period, s.bucket.window): s.reserved for s in states}
    shown = []
    for row, words in zip(rows, budget_table(rows), strict=True):
        reserved = held[row["scope"], row["subject"], row["period"], row["window"]]
        fill = max(_share(row["spent_usd"] + row["reserved_usd"], row["max_cost_usd"]),
                   _share(row["tokens"] + reserved.tokens, row["max_tokens"]),
                   _share(row["requests"] + reserved.requests, row["max_requests"]))
        shown.append((words["bucket"], words["period"], words["limit"], usd(row["spent_usd"]),
                      usd(row["reserved_usd"]), row["tokens"], row["requests"], _bar(fill), words["resets_at"]))
    return table("budget-buckets", ("bucket", "period", "limit", "spent", "reserved", "tokens", "requests", "fill",
                                    "resets at"), shown)


def _share(used: float, limit: float | None) -> float:
    if limit is None:
        return 0.0
    return 1.0 if limit == 0 else used / limit


def _bar(fill: float) -> Html:
    width = min(100.0, fill * 100)
    full = " full" if fill >= 1 else ""
    # 3 significant digits, never in exponent form: a tiny fill reads 0.0033%, not 0.0%.
    return Html(f'<span class="bar{full}"><span style="width:{width:.1f}%"></span></span>'
                f'{plain(float(f"{fill * 100:.3g}"))}%')


async def _spend(manager: ServiceManager, zone: ZoneInfo, now: float) -> str:
    if "usage" not in _layers(manager):
        return "<p>The usage layer is off: the ledger records nothing.</p>"
    journal = manager.state.usage_journal()
    await journal.flush()  # the calls answered so far are on the page
    since, parts = now - SPEND_DAYS * 86_400, []
    for group, label in SPEND_GROUPS:
        rows = await journal.store.summary(group, zone, since)
        cells = [(row[group], *(_amount(c, row[c]) for c in SPEND_COLUMNS)) for row in rows]
        parts.append(f"<h3>By {escape(label)}</h3>" + (table(f"spend-by-{label}", (label, *SPEND_COLUMNS), cells)
                                                       if cells else "<p>Nothing recorded.</p>"))
    return "".join(parts)


def _amount(column: str, value: Any) -> Any:
    return usd(value) if column == "cost_usd" else value


async def _keys(gateway: Gateway, zone: ZoneInfo) -> str:
    records = await gateway.keys.list()
    if not records:
        return "<p>No keys.</p>"
    rows = [(r.key_id, r.name or "-", r.organisation, r.team or "-", r.user or "-", ", ".join(r.models) or "(all)",
             "disabled" if r.disabled else "enabled", _when(r.created_at, zone)) for r in records[:KEYS_SHOWN]]
    more = f"<p class=note>{len(records) - KEYS_SHOWN} more not shown.</p>" if len(records) > KEYS_SHOWN else ""
    return table("key-records", ("key id", "name", "organisation", "team", "user", "models", "status", "created"),
                 rows) + more


def table(anchor: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """An HTML table: every value escaped but :class:`Html`; numbers right-aligned."""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f'<table id="{escape(anchor)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _cell(value: Any) -> str:
    if isinstance(value, Html):
        return f"<td>{value}</td>"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"<td class=n>{escape(plain(value) if isinstance(value, float) else str(value))}</td>"
    return f"<td>{escape(str(value))}</td>"


def _layers(manager: ServiceManager) -> frozenset[str]:
    return frozenset(entry.name for entry in manager.stack)


def _when(epoch_s: float, zone: ZoneInfo) -> str:
    return dt.datetime.fromtimestamp(epoch_s, zone).isoformat(timespec="seconds")
