"""The gateway's counters, written in the Prometheus text format (0.0.4) by hand: requests by
endpoint, status and key id, a latency histogram by endpoint, tokens and cost by key id; and the
stack's gauges read at each scrape (``provmw.gateway.health.StackState``): each endpoint's breaker
state, each pool deployment's calls in flight and cool-down.

Only key ids (public) label anything; a key's secret never reaches this module.
"""

from __future__ import annotations

import bisect
import collections
from typing import TYPE_CHECKING

from provmw.responses import Usage
from provmw.stores.breakers import BreakerState

if TYPE_CHECKING:
    from provmw.gateway.health import StackState

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds; the gateway adds under a millisecond, a provider takes from tens of ms to minutes.
BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class _Histogram:
    __slots__ = ("counts", "sum_s")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS_S) + 1)  # the last one is +Inf
        self.sum_s = 0.0


class Metrics:
    """Counts for ``GET /metrics``; one per app, updated by every request (no locking: one event loop)."""

    def __init__(self) -> None:
        self._requests: collections.Counter[tuple[str, int, str]] = collections.Counter()
        self._latency: dict[str, _Histogram] = {}
        self._tokens: collections.Counter[tuple[str, str]] = collections.Counter()
        self._cost: dict[str, float] = {}

    def observe(self, endpoint: str, status: int, key_id: str, seconds: float) -> None:
        """One request answered."""
        self._requests[endpoint, status, key_id] += 1
        histogram = self._latency.get(endpoint)
        if histogram is None:
            histogram = self._latency[endpoint] = _Histogram()
        histogram.counts[bisect.bisect_left(BUCKETS_S, seconds)] += 1
        histogram.sum_s += seconds

    def add_usage(self, key_id: str, usage: Usage | None) -> None:
        """What one answered call used, counted for its key."""
        if usage is None:
            return
        if usage.input_tokens:
            self._tokens[key_id, "input"] += usage.input_tokens
        if usage.output_tokens:
            self._tokens[key_id, "output"] += usage.output_tokens
        if usage.cost_usd:
            self._cost[key_id] = self._cost.get(key_id, 0.0) + usage.cost_usd

    def render(self, stack: StackState | None = None) -> str:
        """Every metric in the text format, with ``stack``'s gauges when given."""
        lines = ["# HELP provmw_gateway_requests_total Requests answered, by endpoint, status and key id.",
                 "# TYPE provmw_gateway_requests_total counter"]
        lines += [f'provmw_gateway_requests_total{{endpoint="{_label(n)}",status="{s}",key_id="{_label(k)}"}} {c}'
                  for (n, s, k), c in sorted(self._requests.items())]
        lines += ["# HELP provmw_gateway_request_duration_seconds Time to answer (a stream: to its end).",
                  "# TYPE provmw_gateway_request_duration_seconds histogram"]
        for endpoint, histogram in sorted(self._latency.items()):
            lines += _histogram_lines("provmw_gateway_request_duration_seconds", endpoint, histogram)
        lines += ["# HELP provmw_gateway_tokens_total Tokens used, by key id and direction.",
                  "# TYPE provmw_gateway_tokens_total counter"]
        lines += [f'provmw_gateway_tokens_total{{key_id="{_label(k)}",direction="{d}"}} {c}'
                  for (k, d), c in sorted(self._tokens.items())]
        lines += ["# HELP provmw_gateway_cost_usd_total Cost in US dollars, by key id.",
                  "# TYPE provmw_gateway_cost_usd_total counter"]
        lines += [f'provmw_gateway_cost_usd_total{{key_id="{_label(k)}"}} {c!r}' for k, c in sorted(self._cost.items())]
        if stack is not None:
            lines += _stack_lines(stack)
        return "\n".join(lines) + "\n"


def _stack_lines(stack: StackState) -> list[str]:
    # A breaker's state as an enum gauge (one series per state, 1 for the current one), as
    # Prometheus exporters write a state set.
    lines = ["# HELP provmw_gateway_breaker_state Each endpoint's circuit breaker, by configuration: 1 for its state.",
             "# TYPE provmw_gateway_breaker_state gauge"]
    lines += [f'provmw_gateway_breaker_state{{configuration="{_label(b.configuration)}",state="{s.value}"}} '
              f"{int(b.state is s)}" for b in stack.breakers for s in BreakerState]
    lines += ["# HELP provmw_gateway_pool_in_flight Calls in flight on each pool deployment.",
              "# TYPE provmw_gateway_pool_in_flight gauge"]
    lines += [f'provmw_gateway_pool_in_flight{{{_pool_labels(p.pool, p.deployment)}}} {p.in_flight}'
              for p in stack.pools]
    lines += ["# HELP provmw_gateway_pool_cooling_down Whether a pool deployment is cooling down (1) or not (0).",
              "# TYPE provmw_gateway_pool_cooling_down gauge"]
    lines += [f'provmw_gateway_pool_cooling_down{{{_pool_labels(p.pool, p.deployment)}}} {int(p.cooldown_s > 0)}'
              for p in stack.pools]
    lines += ["# HELP provmw_gateway_pool_cooldown_seconds Seconds left of a pool deployment's cool-down.",
              "# TYPE provmw_gateway_pool_cooldown_seconds gauge"]
    lines += [f'provmw_gateway_pool_cooldown_seconds{{{_pool_labels(p.pool, p.deployment)}}} {p.cooldown_s!r}'
              for p in stack.pools]
    return lines


def _pool_labels(pool: str, deployment: str) -> str:
    return f'pool="{_label(pool)}",deployment="{_label(deployment)}"'


def _histogram_lines(name: str, endpoint: str, histogram: _Histogram) -> list[str]:
    label = f'endpoint="{_label(endpoint)}"'
    lines, running = [], 0
    for bound, count in zip((*BUCKETS_S, None), histogram.counts, strict=True):
        running += count
        le = "+Inf" if bound is None else repr(bound)
        lines.append(f'{name}_bucket{{{label},le="{le}"}} {running}')
    lines += [f"{name}_sum{{{label}}} {histogram.sum_s!r}", f"{name}_count{{{label}}} {running}"]
    return lines


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
