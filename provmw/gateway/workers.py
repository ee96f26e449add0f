"""``provmw serve --workers N``: N processes serving one port, and the parent that keeps them.

Each worker is a fresh interpreter (``multiprocessing``'s spawn context: nothing inherited but
its :class:`WorkerSpec`) that builds its own ``ServiceManager`` and key store from the settings
file and binds the port with ``SO_REUSEPORT``, so the kernel spreads connections over the
workers. They share what the settings put in shared stores: on one host the SQLite ledger,
budgets and key store (WAL files, safe for several processes: ADR 0036); across hosts Redis
and PostgreSQL (docs/operations.md, "Workers and fleets").

The parent:

- reserves the port before any worker starts (a socket bound with ``SO_REUSEPORT`` that never
  listens, so it takes no connection): ``--port 0`` then names one free port for every worker,
  and a worker started again later binds that same port;
- waits for every worker to listen, then reports the URL; when one exits or does not listen
  within ``start_timeout_s``, it stops the others and returns 1;
- starts a worker again when one exits on its own (a crash, the OOM killer), and gives up
  (returns 1, the others stopped) after ``max_start_failures`` failed starts in a row;
- on SIGTERM or SIGINT, sends SIGTERM to every worker (each stops accepting, lets its calls in
  flight finish within its shutdown grace, closes its manager: the ledger durable) and waits
  for them; it returns 0 when every worker stopped cleanly.

A worker also stops when its parent is gone (the pipe to it reads end-of-file), so a parent
killed outright leaves no orphan serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from provmw.errors import ConfigurationError, ProvmwError
from provmw.gateway._endpoint import GatewayOptions
from provmw.gateway.serving import _signals_set, serve

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

__all__ = ["WorkerSpec", "reserve_port", "run_workers", "worker_main"]

log = logging.getLogger("provmw.gateway")
STOP_MARGIN_S = 10.0  # beyond the shutdown grace, for a worker to close its manager and key store


@attrs.frozen(kw_only=True)
class WorkerSpec:
    """What a worker builds its gateway from (picklable: it crosses into a spawned process)."""

    config: str | None  # the settings file; None: found as every command finds it
    keys: str  # a SQLite file's path or a key store's URL (``--keys``)
    host: str
    port: int
    options: GatewayOptions = attrs.field(factory=GatewayOptions)
    verbose: bool = False


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (0: a free port) with ``SO_REUSEPORT`` that never listens:
    it holds the port for workers that bind it the same way."""
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ConfigurationError("--workers needs SO_REUSEPORT (Linux); on this system run one process a port")
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    reserved = socket.socket(family, kind, proto)
    try:
        reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        reserved.bind(address)
    except OSError as exc:
        reserved.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return reserved


def worker_main(spec: WorkerSpec, parent: Connection) -> None:
    """A worker process: serve until SIGTERM/SIGINT or until the parent is gone."""
    logging.basicConfig(level=logging.INFO if spec.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s (%(processName)s): %(message)s")
    try:
        asyncio.run(_serve_worker(spec, parent))
    except KeyboardInterrupt:  # a ^C that came before the server took the signals
        pass
    except ProvmwError as exc:
        sys.stderr.write(f"provmw serve ({multiprocessing.current_process().name}): {type(exc).__name__}: {exc}\n")
        sys.exit(2)


async def _serve_worker(spec: WorkerSpec, parent: Connection) -> None:
    from provmw.gateway.key_stores import open_key_store
    from provmw.manager import ServiceManager

    manager = ServiceManager.from_file(spec.config)
    keys = open_key_store(spec.keys, manager.settings, host=manager.host)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(parent.fileno(), stop.set)  # the parent never writes: readable means it is gone
    try:
        await serve(manager, keys, host=spec.host, port=spec.port, options=spec.options,
                    on_listening=parent.send, stop=stop, reuse_port=True)
    finally:
        loop.remove_reader(parent.fileno())


@attrs.define
class _Worker:
    index: int
    process: BaseProcess
    pipe: Connection  # the parent's end: while it is open, the worker serves


class _Fleet:
    """The workers of one port: start one, watch them exit, stop them all."""

    def __init__(self, spec: WorkerSpec, start_timeout_s: float) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._spec, self._start_timeout_s = spec, start_timeout_s
        self.workers: dict[int, _Worker] = {}
        self.exited: asyncio.Queue[_Worker] = asyncio.Queue()

    async def start(self, index: int) -> str | None:
        """Start worker ``index``; the URL it listens on, or None when it could not start."""
        mine, theirs = self._context.Pipe()
        process = self._context.Process(target=worker_main, args=(self._spec, theirs), name=f"worker-{index}")
        process.start()
        theirs.close()
        worker = self.workers[index] = _Worker(index, process, mine)
        ready = await asyncio.to_thread(_ready, [mine, process.sentinel], self._start_timeout_s)
        url = _received(mine) if mine in ready else None
        if url is None:
            # The pipe's end-of-file comes as the worker exits: its exit code follows at once.
            await asyncio.to_thread(process.join, STOP_MARGIN_S if ready else 0)
            log.error("provmw serve: worker %d did not start (%s)", index, f"exit code {process.exitcode}"
                      if process.exitcode is not None else f"not listening after {self._start_timeout_s:g} s")
            self.end(worker)
            return None
        asyncio.get_running_loop().add_reader(process.sentinel, self._on_exit, worker)
        log.info("provmw serve: worker %d (pid %s) listening on %s", index, process.pid, url)
        return url

    def _on_exit(self, worker: _Worker) -> None:
        asyncio.get_running_loop().remove_reader(worker.process.sentinel)
        worker.process.join()  # at once: it has exited; joined, it has its exit code
        self.exited.put_nowait(worker)

    def end(self, worker: _Worker) -> None:
        """Forget a worker that is not serving (killed if it still runs)."""
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join()
        worker.pipe.close()
        if self.workers.get(worker.index) is worker:
            del self.workers[worker.index]

    async def stop_all(self, grace_s: float) -> bool:
        """SIGTERM to every worker, a wait of ``grace_s`` for them, SIGKILL to the rest; whether all
        stopped cleanly (exit code 0)."""
        workers = list(self.workers.values())
        loop = asyncio.get_running_loop()
        for worker in workers:
            loop.remove_reader(worker.process.sentinel)
            if worker.process.is_alive():
                worker.process.terminate()
        await asyncio.to_thread(_wait_all, [w.process.sentinel for w in workers], grace_s)
        for worker in workers:
            self.end(worker)
        return all(w.process.exitcode == 0 for w in workers)


def _ready(waiting: list[Connection | int], timeout_s: float) -> list[object]:
    return list(multiprocessing.connection.wait(waiting, timeout_s))


def _received(pipe: Connection) -> str | None:
    try:
        return str(pipe.recv())
    except (EOFError, OSError):
        return None


def _wait_all(sentinels: Sequence[int], timeout_s: float) -> None:
    waiting = list(sentinels)
    end = time.monotonic() + timeout_s
    while waiting and (left := end - time.monotonic()) > 0:
        for done in multiprocessing.connection.wait(waiting, left):
            waiting.remove(done)  # type: ignore[arg-type]


async def run_workers(spec: WorkerSpec, count: int, *, on_listening: Callable[[str], None],
                      start_timeout_s: float = 60.0, max_start_failures: int = 3) -> int:
    """Serve with ``count`` workers until SIGTERM/SIGINT (this module's text); the exit status."""
    with contextlib.closing(reserve_port(spec.host, spec.port)) as reserved:
        fleet = _Fleet(attrs.evolve(spec, port=reserved.getsockname()[1]), start_timeout_s)
        stop = asyncio.Event()
        with _signals_set(stop):
            try:
                if not await _started(fleet, count, stop):
                    return 1
                if not stop.is_set():
                    on_listening(_url(spec.host, reserved.getsockname()[1]))
                if not await _kept(fleet, stop, max_start_failures):
                    return 1
            finally:
                clean = await fleet.stop_all(spec.options.shutdown_grace_s + STOP_MARGIN_S)
        return 0 if clean else 1


async def _started(fleet: _Fleet, count: int, stop: asyncio.Event) -> bool:
    """Whether every worker started (or a stop came first, which is no failure)."""
    starting: asyncio.Future[Any] = asyncio.gather(*(fleet.start(index) for index in range(count)))
    stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not starting.done():
        await starting  # bounded by the start timeout; stop_all then stops what started
        return True
    return None not in starting.result()


async def _kept(fleet: _Fleet, stop: asyncio.Event, max_start_failures: int) -> bool:
    """Start again each worker that exits until ``stop``; False when one failed to start too often."""
    failures = 0
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while True:
            exited = asyncio.ensure_future(fleet.exited.get())
            await asyncio.wait({stopping, exited}, return_when=asyncio.FIRST_COMPLETED)
            if stopping.done():
                exited.cancel()
                return True
            worker = exited.result()
            log.warning("provmw serve: worker %d (pid %s) exited with code %s; starting it again", worker.index,
                        worker.process.pid, worker.process.exitcode)
            fleet.end(worker)
            while await fleet.start(worker.index) is None:
                failures += 1
                if failures >= max_start_failures:
                    log.error("provmw serve: worker %d failed to start %d times in a row; stopping",
                              worker.index, failures)
                    return False
            failures = 0
            log.warning("provmw serve: worker %d started again (pid %s)", worker.index,
                        fleet.workers[worker.index].process.pid)
    finally:
        stopping.cancel()


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
