"""Trace one warm unary ``chat``: provmw's function calls, modules and module changes (issue 34).

One ``ServiceManager.chat`` through the default stack (the cache on for chat, so every call
is a miss; the SQLite ledger in a temporary folder) against the fake provider
(``python -m provmw.testing``, a process of its own on loopback, so that its code, which is
provmw's too, is not counted). After ``--warm`` calls, ``--traced`` calls are traced one by
one with a profile hook (``sys.setprofile``, and ``threading.setprofile`` for the SQLite
worker threads, installed before the manager starts any).

What counts: a *call* is a new Python frame whose code lives under the provmw package
directory (a coroutine counts once, however often it is resumed; resumptions are shown
apart); *modules* are the distinct files of those calls; a *module change* is a call in
another file than the previous call on the same thread. The run is cut in two at the HTTP
post (aiohttp's ``ClientSession._request`` starting) and ends at the ledger's durable point
(the usage journal's ``durable`` returning for the last time). Calls into ``manager.py``
made while the pipeline runs (from ``MiddlewarePipeline.run`` to the end of the outermost
layer) are layers calling back up into the manager. Files are matched by directory, not by
module name, so the same script measures older trees (run from the old tree, by path)::

    python -m benchmarks.call_trace --warm 20 --traced 5 [--stack readme] [--list]
    cd /old/tree && PYTHONPATH=$PWD python /work/main/benchmarks/call_trace.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import aiohttp

import provmw
from benchmarks.end_to_end import FULL
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import load_settings

__all__ = ["Event", "Figures", "Recorder", "figures", "main"]

PACKAGE = Path(provmw.__file__).resolve().parent
POST = aiohttp.ClientSession._request.__code__
SETTINGS = """
default = "primary"
[configurations.primary]
provider = "openai"
model = "gpt-4o-mini"
base_url = "{url}"
api_key_env = "PROVMW_TRACE_KEY"
options = {{ temperature = 0, max_tokens = 64 }}
[middleware.cache]
operations = ["embedding", "chat"]
[middleware.usage]
path = "{folder}/provmw.sqlite3"
"""


@dataclass(frozen=True)
class Event:
    """One profile event: ``call`` (a new frame), ``resume`` (a suspended coroutine goes on) or ``return``."""

    kind: str
    frame: int
    path: str
    name: str
    thread: int


@dataclass
class Recorder:
    """The profile hook: records provmw's frames (and aiohttp's post) while ``on``, on every thread."""

    on: bool = False
    events: list[Event] = field(default_factory=list)
    frames: dict[int, int] = field(default_factory=dict)
    # Held until the trace is read, so that no frame id is reused by a later frame.
    kept: list[FrameType] = field(default_factory=list)

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on or event not in ("call", "return"):
            return
        code = frame.f_code
        if code is not POST and not code.co_filename.startswith(str(PACKAGE)):
            return
        index = self.frames.get(id(frame))
        if index is None:
            index = self.frames[id(frame)] = len(self.frames)
            self.kept.append(frame)
        elif event == "call":
            event = "resume"
        name = code.co_qualname if code is not POST else "aiohttp.ClientSession._request"
        self.events.append(Event(event, index, code.co_filename, name, threading.get_ident()))

    def take(self) -> list[Event]:
        """Stop recording; return the events and start afresh."""
        self.on = False
        events, self.events, self.frames, self.kept = self.events, [], {}, []
        return events


@dataclass(frozen=True)
class Part:
    """Calls, modules, module changes and resumptions between two points of the trace."""

    calls: int
    modules: int
    changes: int
    resumptions: int


@dataclass(frozen=True)
class Figures:
    """One traced call: chat to the HTTP post, the post to the durable point, chat's whole run;
    and the manager's functions called while the pipeline ran."""

    to_post: Part
    to_durable: Part
    whole: Part
    manager_calls: tuple[str, ...]


def _calls(events: Sequence[Event]) -> list[tuple[int, Event]]:
    return [(i, e) for i, e in enumerate(events) if e.kind == "call" and e.path.startswith(str(PACKAGE))]


def _changes(events: Sequence[Event]) -> set[int]:
    """Indexes of the calls made in another file than the previous call on the same thread."""
    last: dict[int, str] = {}
    changed = set()
    for i, event in _calls(events):
        if last.get(event.thread, event.path) != event.path:
            changed.add(i)
        last[event.thread] = event.path
    return changed


def _part(events: Sequence[Event], start: int, end: int, changed: set[int]) -> Part:
    calls = [(i, e) for i, e in _calls(events) if start <= i < end]
    resumed = sum(1 for e in events[start:end] if e.kind == "resume" and e.path.startswith(str(PACKAGE)))
    return Part(len(calls), len({e.path for _, e in calls}), sum(1 for i, _ in calls if i in changed), resumed)


def _first(events: Sequence[Event], after: int, kind: str, name: str) -> int:
    return next(i for i, e in enumerate(events) if i >= after and e.kind == kind and e.name.endswith(name))


def _last_return(events: Sequence[Event], frame: int) -> int:
    return max(i for i, e in enumerate(events) if e.frame == frame and e.kind == "return")


def _pipeline_calls_into_manager(events: Sequence[Event]) -> tuple[str, ...]:
    """The manager's functions called from the start of ``MiddlewarePipeline.run`` to the outermost
    layer's end (``run`` only builds the onion and returns its outermost coroutine, which runs next)."""
    run = _first(events, 0, "call", "MiddlewarePipeline.run")
    built = _last_return(events, events[run].frame)
    calls = _calls(events)
    outer = next(e for i, e in calls if i > built)
    end = _last_return(events, outer.frame)
    manager = str(PACKAGE / "manager.py")
    return tuple(e.name for i, e in calls if run <= i <= end and e.path == manager)


def figures(events: Sequence[Event]) -> Figures:
    """Read one traced chat's events (the first is ``ServiceManager.chat`` starting)."""
    post = _first(events, 0, "call", "aiohttp.ClientSession._request")
    durable = _first(events, post, "call", ".durable")
    end = _last_return(events, events[durable].frame) + 1
    done = _last_return(events, events[0].frame) + 1
    changed = _changes(events)
    return Figures(_part(events, 0, post, changed), _part(events, post, end, changed),
                   _part(events, 0, done, changed), _pipeline_calls_into_manager(events))


@contextmanager
def fake_provider() -> Iterator[str]:
    """``python -m provmw.testing`` on a free loopback port, in a process of its own; yields its OpenAI URL."""
    child = subprocess.Popen([sys.executable, "-m", "provmw.testing", "--port", "0"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # "fake provider listening on http://127.0.0.1:N"
        yield line.split()[-1] + "/v1"
    finally:
        child.terminate()
        child.wait(timeout=10)


def settings_text(stack: str, url: str, folder: Path) -> str:
    """The settings file of ``stack``: ``default``, or ``readme`` (the end-to-end benchmark's full stack:
    a fallback chain, retry, breaker, deadline, rate limits that never bind, SQLite ledger)."""
    if stack == "readme":
        return FULL.format(url=url).replace("PROVMW_BENCH_KEY", "PROVMW_TRACE_KEY")
    return SETTINGS.format(url=url, folder=folder)


async def _traced(url: str, folder: Path, recorder: Recorder, args: argparse.Namespace) -> list[list[Event]]:
    path = folder / "provmw.toml"
    path.write_text(settings_text(args.stack, url, folder))
    settings = load_settings(path, environ={**os.environ, "PROVMW_TRACE_KEY": "sk-trace"})
    found = []
    async with ServiceManager(settings, host=PluginHost(PluginPolicy(autoload=False), environ={})) as manager:
        for n in range(args.warm):
            await manager.chat(f"Say hello to warm-up visitor {n}", user="ada")
        for n in range(args.traced):
            await asyncio.sleep(0.05)  # the previous call's background work (journal writer) settles
            recorder.on = True
            await manager.chat(f"Say hello to traced visitor {n}", user="ada")
            events = recorder.take()
            found.append(events[_first(events, 0, "call", "ServiceManager.chat"):])
    return found


def _span(values: Sequence[int]) -> str:
    low, high, middle = min(values), max(values), statistics.median(values)
    return f"{middle:g}" if low == high else f"{middle:g} ({low}-{high})"


def table(found: Sequence[Figures]) -> str:
    """Markdown: medians (and ranges) over the traced calls."""
    lines = ["| part | provmw calls | modules | module changes | coroutine resumptions |", "|---|---|---|---|---|"]
    for label, pick in (("ServiceManager.chat -> HTTP post", "to_post"),
                        ("HTTP post -> ledger durable point", "to_durable"),
                        ("ServiceManager.chat, whole call", "whole")):
        parts: list[Part] = [getattr(f, pick) for f in found]
        lines.append(f"| {label} | {_span([p.calls for p in parts])} | {_span([p.modules for p in parts])} | "
                     f"{_span([p.changes for p in parts])} | {_span([p.resumptions for p in parts])} |")
    return "\n".join(lines)


def listing(events: Sequence[Event]) -> str:
    """Every provmw call of one traced chat, in order: where the trace cuts, its thread, file and function."""
    post = _first(events, 0, "call", "aiohttp.ClientSession._request")
    end = _last_return(events, events[_first(events, post, "call", ".durable")].frame)
    threads = {t: n for n, t in enumerate(dict.fromkeys(e.thread for e in events))}
    return "\n".join(f"{'1' if i < post else '2' if i <= end else '-'} t{threads[e.thread]} "
                     f"{Path(e.path).relative_to(PACKAGE)} {e.name}" for i, e in _calls(events))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm", type=int, default=20, help="untraced calls first")
    parser.add_argument("--traced", type=int, default=5, help="calls traced, one at a time")
    parser.add_argument("--stack", choices=("default", "readme"), default="default",
                        help="the built-in layers at their defaults, or the end-to-end benchmark's full stack")
    parser.add_argument("--list", action="store_true", help="list the first traced call's provmw calls, in order")
    args = parser.parse_args(argv)
    recorder = Recorder()
    threading.setprofile(recorder)  # the SQLite threads start later, with the hook
    sys.setprofile(recorder)
    try:
        with fake_provider() as url, tempfile.TemporaryDirectory(prefix="provmw-trace-") as folder:
            traces = asyncio.run(_traced(url, Path(folder), recorder, args))
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    found = [figures(events) for events in traces]
    if args.list:
        print(listing(traces[0]))
    print(f"provmw at {PACKAGE}, {args.stack} stack: {args.traced} warm unary chats traced after {args.warm}")
    print(table(found))
    back = found[0].manager_calls
    print(f"calls into manager.py while the pipeline ran: {_span([len(f.manager_calls) for f in found])}"
          f"{' (' + ', '.join(back) + ')' if back else ''}")


if __name__ == "__main__":
    main()
