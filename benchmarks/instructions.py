"""Instructions and system calls per call: provmw's own cost, counted rather than timed.

On a shared machine the timed benchmarks move by a third between runs of the same commit.
A count does not: ``valgrind --tool=callgrind`` counts the instructions the process runs
(to within 0.5% between runs), and ``strace -c -f`` its system calls. Each contender of
:mod:`benchmarks.cpu` (no socket: an HTTP client that answers after one turn of the loop) is
run twice in a fresh interpreter, with 0 and with ``--calls`` calls after the same warm-up,
and the difference is divided by ``--calls``: imports, the warm-up and closing cancel out.
What a count misses is what a system call or a cold cache costs in time, which is why the
system calls are counted apart::

    python -m benchmarks.instructions                 # needs valgrind; strace for --syscalls
    python -m benchmarks.instructions --only full --syscalls
    python -m benchmarks.instructions --only full --without cache   # a layer's share: the difference

``--network C`` counts the end-to-end contenders instead (:mod:`benchmarks.end_to_end`: raw
aiohttp, the floor, the full stack...), ``C`` calls at once against the loopback server, in
its own process and not counted: the client's whole cost of a call, aiohttp and the socket's
system calls included, where the timed c=64 figures move by a fifth between runs::

    python -m benchmarks.instructions --network 64 --only raw floor full
    python -m benchmarks.instructions --network 64 --only full --without usage
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks._loopback import serving
from benchmarks.cpu import TEMPLATES, URL, InstantHttp
from benchmarks.end_to_end import CONTENDERS, _managed, _manager, contender, throughput

__all__ = ["main"]

WARM_UP = 300


def _without(template: str, layers: list[str]) -> str:
    """``template`` with each of ``layers`` (built-in middleware names) switched off."""
    for layer in layers:
        head = f"[middleware.{layer}]"
        if f"{head}\nenabled = false" in template:
            continue
        template = template.replace(head, f"{head}\nenabled = false") if head in template \
            else f"{template}\n{head}\nenabled = false\n"
    return template


async def _calls(name: str, calls: int, folder: Path, without: list[str]) -> None:
    template, text = TEMPLATES[name]
    async with _manager(_without(template, without).format(url=URL), folder, InstantHttp()) as manager:
        for _ in range(WARM_UP + calls):
            await manager.chat(text(), user="ada", tenant="acme")


async def _network_calls(name: str, calls: int, folder: Path, without: list[str], concurrency: int) -> None:
    made = _managed(_without(TEMPLATES[name][0], without), TEMPLATES[name][1]) if without else contender(name)
    with serving() as url:
        async with made(url, folder) as call:
            await throughput(call, WARM_UP, concurrency)
            if calls:
                await throughput(call, calls, concurrency)


def _child(name: str, calls: int, without: list[str], network: int) -> None:
    with tempfile.TemporaryDirectory(prefix="provmw-count-") as folder:
        asyncio.run(_network_calls(name, calls, Path(folder), without, network) if network
                    else _calls(name, calls, Path(folder), without))


def _run(tool: list[str], name: str, calls: int, without: list[str], network: int) -> str:
    command = [*tool, sys.executable, "-m", "benchmarks.instructions", "--child", name, str(calls),
               "--network", str(network), "--without", *without]
    return subprocess.run(command, capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": "0"}).stderr


def instructions(name: str, calls: int, without: list[str], network: int = 0) -> float:
    """Instructions per call of contender ``name``, with the layers ``without`` names switched off
    (or, with ``network`` calls at once, of the end-to-end contender ``name``)."""
    def count(n: int) -> int:
        found = re.search(r"Collected : (\d+)", _run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"],
                                                     name, n, without, network))
        assert found is not None, "callgrind printed no total"
        return int(found.group(1))

    return (count(calls) - count(0)) / calls


def syscalls(name: str, calls: int, without: list[str]) -> dict[str, float]:
    """System calls per call of contender ``name``, by name (those made at least once every 100 calls)."""
    def count(n: int) -> Counter[str]:
        with tempfile.NamedTemporaryFile(suffix=".strace") as out:
            _run(["strace", "-f", "-c", "-o", out.name], name, n, without, 0)
            rows = (line.split() for line in Path(out.name).read_text().splitlines())
            return Counter({row[-1]: int(row[3]) for row in rows if len(row) >= 5 and row[0][0].isdigit()})

    made = count(calls)
    made.subtract(count(0))
    return {call: n / calls for call, n in made.most_common() if call != "total" and n / calls >= 0.01}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--only", nargs="*", default=None, choices=sorted({*TEMPLATES, *CONTENDERS}),
                        help="contenders (default: bare full hit; with --network: raw floor full)")
    parser.add_argument("--syscalls", action="store_true", help="also count system calls (strace)")
    parser.add_argument("--without", nargs="*", default=[], metavar="LAYER",
                        help="built-in middleware to switch off (a layer's share is the difference)")
    parser.add_argument("--network", type=int, default=0, metavar="C",
                        help="count the end-to-end contenders, C calls at once, against the loopback server")
    parser.add_argument("--child", nargs=2, metavar=("NAME", "CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]), args.without, args.network)
        return
    names = args.only or (["raw", "floor", "full"] if args.network else ["bare", "full", "hit"])
    if unknown := [n for n in names if n not in (CONTENDERS if args.network else TEMPLATES)]:
        parser.error(f"not a contender{' of the end-to-end benchmark' if args.network else ''}: {', '.join(unknown)}")
    if args.network and args.syscalls:
        parser.error("--network counts instructions only (strace would count the server's system calls too)")
    if args.without and (unmanaged := [n for n in names if n not in TEMPLATES]):
        parser.error(f"--without switches off layers of provmw's manager, which {', '.join(unmanaged)} does not use")
    tools = ["valgrind"] + (["strace"] if args.syscalls else [])
    if missing := [tool for tool in tools if shutil.which(tool) is None]:
        parser.error(f"needs {' and '.join(missing)} on PATH")
    print("| contender | instructions per call |" + (" system calls per call |" if args.syscalls else ""))
    print("|---|---|" + ("---|" if args.syscalls else ""))
    for name in names:
        row = f"| {name} | {instructions(name, args.calls, args.without, args.network):,.0f} |"
        if args.syscalls:
            made = syscalls(name, args.calls, args.without)
            row += " " + ", ".join(f"{call} {n:.2f}" for call, n in made.items()) + " |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
