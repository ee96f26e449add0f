"""Faults for the fake provider from a shell: command-line options and an admin endpoint.

Both speak one vocabulary, a :class:`FaultPlan`, so ``--fail 429:1 --header Retry-After=2``
and ``POST /_admin/faults {"fail": "429:1", "header": {"Retry-After": "2"}}`` mean the
same thing. A plan maps onto ``FakeProvider.script`` (the next N requests) or
``FakeProvider.fail_randomly`` (always, or a seeded share of requests).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs
from aiohttp import web

from provmw.context import FrozenMap
from provmw.errors import ConfigurationError

__all__ = ["EXAMPLES", "ROUTES", "Fault", "FaultPlan", "RequestLimit", "add_fault_arguments", "admin_routes",
           "plans_from_arguments"]

ROUTES = ("chat", "completion", "embedding", "messages", "responses", "images", "image_edits", "transcriptions",
          "speech", "rerank", "moderations")


@attrs.frozen
class Fault:
    """What to do instead of (or before) answering one request."""

    status: int | None = None
    code: str | None = None
    message: str = "injected fault"
    headers: FrozenMap = attrs.field(factory=FrozenMap, converter=FrozenMap)
    delay_s: float = 0.0
    malformed_json: bool = False
    drop_connection: bool = False
    cut_stream_after: int | None = None
    # Stream faults count the stream's events (``FakeWire.frames``) sent before they strike:
    # 0 is before the first. A stall waits ``stall_s`` (writing the wire's keepalive every
    # ``keepalive_s`` when set); an in-band error is the wire's error event (``code`` and
    # ``message``) after an HTTP 200; a malformed event is one the wire's own format cannot parse.
    stall_after: int | None = None
    stall_s: float = 0.0
    keepalive_s: float | None = None
    stream_error_after: int | None = None
    malformed_after: int | None = None
    # A stream that ends cleanly (no error, no cut) with its last ``withhold_last`` events never
    # sent, as a provider that closed early would; ``split_frames`` writes each event a byte at a
    # time, so its framing arrives split across reads.
    withhold_last: int = 0
    split_frames: bool = False
    # String values of a JSON answer (not a stream) replaced wherever they occur, e.g. the text by
    # a number: ``Fault(replace={"echo: hi": 42})``, for answers whose fields have the wrong type.
    replace: FrozenMap | None = attrs.field(default=None, converter=attrs.converters.optional(FrozenMap))
    # A raw usage object that replaces the answer's (streams included), e.g. a provider's
    # cache counts: ``Fault(usage={"input_tokens": 3, "cache_creation_input_tokens": 12304})``.
    usage: FrozenMap | None = attrs.field(default=None, converter=attrs.converters.optional(FrozenMap))


@attrs.define
class RequestLimit:
    """A provider's requests-a-minute limit: a request beyond ``requests_per_minute`` in the last
    60 seconds of ``clock`` is answered 429 with ``retry-after`` (whole seconds until one is let in).

    The window slides, as providers' limits do, and only admitted requests fill it. ``clock`` is
    injectable, so a test simulates minutes instead of waiting them; ``admitted`` and ``refused``
    count what the limit did.
    """

    requests_per_minute: int = attrs.field(validator=attrs.validators.ge(0))
    clock: Callable[[], float] = time.monotonic
    admitted: int = 0
    refused: int = 0
    _times: collections.deque[float] = attrs.field(factory=collections.deque, init=False, repr=False)

    def refusal(self) -> float | None:
        """None when one more request is let in now (and counted); else the seconds until one is."""
        now = self.clock()
        while self._times and self._times[0] <= now - 60:
            self._times.popleft()
        if len(self._times) < self.requests_per_minute:
            self._times.append(now)
            self.admitted += 1
            return None
        self.refused += 1
        return self._times[0] + 60 - now if self._times else 60.0


class _Scriptable(Protocol):
    """What a plan and the admin endpoint use of ``provmw.testing.FakeProvider``."""

    @property
    def routes(self) -> Sequence[str]: ...

    def script(self, *faults: Fault, route: str | None = None, model: str | None = None) -> None: ...

    def fail_randomly(self, rate: float, fault: Fault, *, route: str | None = None,
                      model: str | None = None, seed: int = 0) -> None: ...

    def count(self, route: str | None = None, model: str | None = None) -> int: ...

    def clear_faults(self) -> None: ...

EXAMPLES = """\
examples:
  provmw fake-provider --fail 429:1 --header Retry-After=2   # the next request: 429, retry in 2 s
  provmw fake-provider --fail 401                            # every request: 401
  provmw fake-provider --fail 500 --route chat               # chat only; embeddings still answer
  provmw fake-provider --delay 5 --times 3                   # the next 3 answers take 5 s
  provmw fake-provider --drop                                # close the connection mid-answer
  provmw fake-provider --stream-error-after 0 --code overloaded_error  # HTTP 200, then an error event
  provmw fake-provider --stall-after 0 --stall 30            # a stream that never sends its first token
  provmw fake-provider --malformed --times 1                 # one body that is not JSON
  provmw fake-provider --fail 503 --fail-rate 0.3 --seed 7   # 30% of requests, reproducibly

while it runs (same options as JSON; counts of requests received):
  curl -X POST localhost:8765/_admin/faults -d '{"fail": "429:1", "header": {"Retry-After": "2"}}'
  curl -X DELETE localhost:8765/_admin/faults
  curl localhost:8765/_admin/requests
"""

_JSON_KEYS = frozenset({"fail", "times", "header", "delay", "drop", "malformed", "cut_stream_after",
                        "stall_after", "stall", "keepalive", "stream_error_after", "malformed_after",
                        "fail_rate", "seed", "route", "model", "code", "message"})


@attrs.frozen
class FaultPlan:
    """One fault, whom it hits (route, model) and how often (``times``, ``fail_rate`` or always)."""

    fault: Fault
    times: int | None = None
    fail_rate: float | None = None
    seed: int = 0
    route: str | None = None
    model: str | None = None

    def apply(self, fake: _Scriptable) -> None:
        """Add this plan to the fake's script."""
        where = {"route": self.route, "model": self.model}
        if self.times is not None:
            fake.script(*[self.fault] * self.times, **where)
        else:
            fake.fail_randomly(1.0 if self.fail_rate is None else self.fail_rate, self.fault, seed=self.seed, **where)


def add_fault_arguments(parser: argparse.ArgumentParser) -> None:
    """The fault options of ``provmw fake-provider`` and ``python -m provmw.testing``."""
    group = parser.add_argument_group("faults (with none, every request is answered)")
    group.add_argument("--fail", metavar="STATUS[:N]", help="answer STATUS to the next N requests (no N: to all)")
    group.add_argument("--header", metavar="K=V", action="append", default=[],
                       help="a header on the fault's answers, e.g. Retry-After=2 (repeatable)")
    group.add_argument("--delay", metavar="SECONDS", type=float, help="wait this long before answering")
    group.add_argument("--drop", action="store_true", help="close the connection halfway through the body")
    group.add_argument("--malformed", action="store_true", help="answer a body that is not JSON")
    group.add_argument("--cut-stream-after", metavar="EVENTS", type=int, help="close a stream after EVENTS events")
    group.add_argument("--stall-after", metavar="EVENTS", type=int, help="stall a stream after EVENTS events (0: "
                       "before the first), for --stall seconds")
    group.add_argument("--stall", metavar="SECONDS", type=float, help="how long --stall-after stalls")
    group.add_argument("--keepalive", metavar="SECONDS", type=float, help="send a keepalive this often while stalled")
    group.add_argument("--stream-error-after", metavar="EVENTS", type=int,
                       help="after EVENTS events of an HTTP 200 stream, send an in-band error event (--code)")
    group.add_argument("--malformed-after", metavar="EVENTS", type=int, help="send a malformed event after EVENTS")
    group.add_argument("--code", help="the error code of the fault's body or in-band error event")
    group.add_argument("--times", metavar="N", type=int, help="only the next N requests (as STATUS:N does)")
    group.add_argument("--fail-rate", metavar="RATE", type=float, help="a share (0-1] of requests, at random")
    group.add_argument("--seed", type=int, help="seed of --fail-rate (default 0: reproducible)")
    group.add_argument("--route", choices=ROUTES, help="only this route (default: all)")
    group.add_argument("--model", help="only requests for this model (default: all)")


def plans_from_arguments(args: argparse.Namespace) -> list[FaultPlan]:
    """The plan the command line asks for, or none when it names no fault."""
    # 0 is a value here (``--stream-error-after 0``: before the first event); only unset is not.
    values = {key: value for key in _JSON_KEYS - {"header"}
              if (value := getattr(args, key, None)) is not None and value is not False}
    if not values and not args.header:
        return []
    values["header"] = _headers(args.header)
    return [plan_from_mapping(values, where="fake-provider")]


def plan_from_mapping(values: Mapping[str, Any], *, where: str, routes: Sequence[str] = ROUTES) -> FaultPlan:
    """A plan from the admin endpoint's JSON (or the parsed options): unknown keys are errors."""
    unknown = sorted(set(values) - _JSON_KEYS)
    if unknown:
        raise ConfigurationError(f"{where}: unknown fault option(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(sorted(_JSON_KEYS))}")
    status, times = _fail(values.get("fail"), where)
    times = _merge_times(times, values.get("times"), where)
    route = values.get("route")
    if route is not None and route not in routes:
        raise ConfigurationError(f"{where}: unknown route {route!r}; routes: {', '.join(routes)}")
    fault = Fault(status=status, code=_text(values, "code", where), headers=_headers(values.get("header")),
                  message=_text(values, "message", where) or "injected fault",
                  delay_s=_number(values.get("delay"), "delay", where, 0.0) or 0.0,
                  drop_connection=bool(values.get("drop")), malformed_json=bool(values.get("malformed")),
                  cut_stream_after=_count(values.get("cut_stream_after"), "cut_stream_after", where, minimum=0),
                  **_stream_faults(values, where))
    if fault == Fault(message=fault.message, code=fault.code, headers=fault.headers):
        raise ConfigurationError(f"{where}: no fault given: use fail, delay, drop, malformed, cut_stream_after, "
                                 "stall_after, stream_error_after or malformed_after")
    return FaultPlan(fault, times, _rate(values.get("fail_rate"), times, where),
                     _count(values.get("seed"), "seed", where, minimum=0) or 0, route, values.get("model"))


def _stream_faults(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    stall_after = _count(values.get("stall_after"), "stall_after", where, minimum=0)
    stall_s = _number(values.get("stall"), "stall", where, 0.0) or 0.0
    if (stall_after is None) != (stall_s == 0.0):
        raise ConfigurationError(f"{where}: stall_after and stall go together (after how many events, how long)")
    return {"stall_after": stall_after, "stall_s": stall_s,
            "keepalive_s": _number(values.get("keepalive"), "keepalive", where, None),
            "stream_error_after": _count(values.get("stream_error_after"), "stream_error_after", where, minimum=0),
            "malformed_after": _count(values.get("malformed_after"), "malformed_after", where, minimum=0)}


def _fail(value: Any, where: str) -> tuple[int | None, int | None]:
    if value is None:
        return None, None
    status, _, times = str(value).partition(":")
    if not status.isdigit() or not 400 <= int(status) <= 599:
        raise ConfigurationError(f"{where}: fail must be STATUS[:N] with STATUS 400-599, got {value!r}")
    return int(status), _count(times or None, "fail's N", where, minimum=1)


def _merge_times(from_fail: int | None, times: Any, where: str) -> int | None:
    given = _count(times, "times", where, minimum=1)
    if from_fail is not None and given is not None and from_fail != given:
        raise ConfigurationError(f"{where}: fail's N ({from_fail}) and times ({given}) disagree")
    return from_fail if from_fail is not None else given


def _rate(value: Any, times: int | None, where: str) -> float | None:
    if value is None:
        return None
    rate = _number(value, "fail_rate", where, None)
    if rate is None or not 0 < rate <= 1:
        raise ConfigurationError(f"{where}: fail_rate must be in (0, 1], got {value!r}")
    if times is not None:
        raise ConfigurationError(f"{where}: fail_rate and a count (STATUS:N or times) exclude each other")
    return rate


def _count(value: Any, name: str, where: str, *, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not str(value).isdigit() or int(value) < minimum:
        raise ConfigurationError(f"{where}: {name} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


def _number(value: Any, name: str, where: str, default: float | None) -> float | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"{where}: {name} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def _text(values: Mapping[str, Any], name: str, where: str) -> str | None:
    value = values.get(name)
    if value is not None and not isinstance(value, str):
        raise ConfigurationError(f"{where}: {name} must be a string, got {value!r}")
    return value


def _headers(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    pairs = [str(item).partition("=") for item in value]
    bad = [key for key, sep, _ in pairs if not sep or not key]
    if bad or isinstance(value, str):
        raise ConfigurationError(f"header must be K=V pairs (e.g. Retry-After=2), got {value!r}")
    return {key: text for key, _, text in pairs}


def admin_routes(fake: _Scriptable) -> Sequence[web.RouteDef]:
    """``POST``/``DELETE /_admin/faults`` and ``GET /_admin/requests`` for ``fake``."""

    async def add(request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read() or b"{}")
            if not isinstance(body, dict):
                raise ConfigurationError("POST /_admin/faults: the body must be a JSON object")
            plan = plan_from_mapping(body, where="POST /_admin/faults", routes=fake.routes)
        except (ValueError, ConfigurationError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        plan.apply(fake)
        return web.json_response({"added": _describe(plan)})

    async def clear(request: web.Request) -> web.Response:
        fake.clear_faults()
        return web.json_response({"cleared": True})

    async def counts(request: web.Request) -> web.Response:
        return web.json_response({"total": fake.count(), "by_route": {r: fake.count(route=r) for r in fake.routes}})

    return [web.post("/_admin/faults", add), web.delete("/_admin/faults", clear), web.get("/_admin/requests", counts)]


def _describe(plan: FaultPlan) -> dict[str, Any]:
    fault = {k: v for k, v in attrs.asdict(plan.fault, recurse=False).items() if v not in (None, False, 0.0, {})}
    fault["headers"] = dict(plan.fault.headers)
    return {"fault": fault, "times": plan.times, "fail_rate": plan.fail_rate, "route": plan.route,
            "model": plan.model}
