"""The processes the gateway benchmarks start and watch: the fake provider, ``provmw serve``, its keys.

Each runs apart from the benchmark's own process (and its GIL), as in the published gateway
figures; this module starts them, reads the URL each prints, and reads what ``/proc`` says of
them (CPU spent, resident memory) without a dependency on psutil.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from provmw.gateway import SqliteKeyStore

__all__ = ["CONFIGURATIONS", "ROOT", "child", "cpu_s", "gateway", "make_keys", "rss_kib", "stack_settings",
           "worker_pids"]

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def child(args: list[str], marker: str, env: Mapping[str, str] | None = None,
          python: str = sys.executable) -> Iterator[str]:
    """A child process, and the URL it prints on the line holding ``marker``."""
    process = subprocess.Popen([python, *args], stdout=subprocess.PIPE, text=True,
                               env=None if env is None else dict(env), cwd=ROOT)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        while marker not in line:
            line = process.stdout.readline()
            assert line, "the child exited before it listened"
        yield line.split(marker, 1)[1].split()[0].strip()
    finally:
        process.terminate()
        process.wait(timeout=30)


@contextlib.contextmanager
def gateway(args: list[str]) -> Iterator[tuple[str, int]]:
    """``provmw serve`` in a child process: its URL and process id."""
    process = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                               env={**os.environ, "BENCH_UPSTREAM_KEY": "sk-bench"})
    try:
        assert process.stdout is not None
        while "listening on " not in (line := process.stdout.readline()):
            assert line, "the gateway exited before it listened"
        yield line.rsplit(" ", 1)[1].strip(), process.pid
    finally:
        process.terminate()
        process.wait(timeout=60)


def _children(pid: int) -> list[int]:
    return [int(each) for each in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its children, as ``/proc`` has them now."""
    total = 0.0
    for each in (pid, *_children(pid)):
        with contextlib.suppress(FileNotFoundError):  # a child that ended meanwhile
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def worker_pids(pid: int) -> list[int]:
    """The serving workers of ``provmw serve --workers N`` (process ``pid``): its spawned children,
    not multiprocessing's resource tracker."""
    found = []
    for each in _children(pid):
        with contextlib.suppress(FileNotFoundError):
            command = Path(f"/proc/{each}/cmdline").read_bytes()
            if b"spawn_main" in command:
                found.append(each)
    return found


def rss_kib(pid: int) -> int:
    """The resident set size of process ``pid`` (``VmRSS``), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise LookupError(f"process {pid} has no VmRSS (a zombie?)")


async def make_keys(path: Path, count: int, *, max_requests: int | None = None, max_cost_usd: float | None = None,
                    **owner: str) -> list[str]:
    """``count`` new virtual keys of organisation ``bench`` in the key store at ``path``, each with
    the daily key budget given (none when neither maximum is)."""
    store = SqliteKeyStore(path)
    try:
        keys = []
        for _ in range(count):
            key, record = await store.create("bench", **owner)
            if max_requests is not None or max_cost_usd is not None:
                await store.set_budget("key", record.key_id, "day", max_requests=max_requests,
                                       max_cost_usd=max_cost_usd)
            keys.append(key)
        return keys
    finally:
        await store.aclose()


def _configuration(name: str, model: str, fake_url: str, fallbacks: tuple[str, ...]) -> str:
    return (f'[configurations.{name}]\nprovider = "openai"\nmodel = "{model}"\nbase_url = "{fake_url}/v1"\n'
            f'api_key_env = "BENCH_UPSTREAM_KEY"\nfallbacks = {json.dumps(list(fallbacks))}\n')


# name: (model, fallbacks): the chat configuration falls back to a second one, as the stack's fallback layer needs.
CONFIGURATIONS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "chat": ("gpt-4o-mini", ("backup",)), "backup": ("gpt-4o", ()), "embed": ("text-embedding-3-small", ())}


def stack_settings(path: Path, fake_url: str,
                   configurations: Mapping[str, tuple[str, tuple[str, ...]]] = CONFIGURATIONS) -> Path:
    """Settings in ``path`` for the default stack (ledger, budgets, retry, breaker, fallback...)
    over ``configurations`` of the fake provider at ``fake_url``. Plugin autoload is off, so the
    stack is provmw's own, whatever else this environment installed."""
    text = "".join(_configuration(name, model, fake_url, fallbacks)
                   for name, (model, fallbacks) in configurations.items())
    text += (f'[middleware.usage]\npath = "{path / "ledger.sqlite3"}"\n'
             f'[middleware.budget]\npath = "{path / "budget.sqlite3"}"\n[plugins]\nautoload = false\n')
    (path / "provmw.toml").write_text(text)
    return path / "provmw.toml"
