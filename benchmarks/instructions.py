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

from benchmarks.cpu import TEMPLATES, URL, InstantHttp
from benchmarks.end_to_end import _manager

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
    async with _manager(_without(template, without).format(url=URL), folder) as manager:
        manager.http = InstantHttp()
        for _ in range(WARM_UP + calls):
            await manager.chat(text(), user="ada", tenant="acme")


def _child(name: str, calls: int, without: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="provmw-count-") as folder:
        asyncio.run(_calls(name, calls, Path(folder), without))


def _run(tool: list[str], name: str, calls: int, without: list[str]) -> str:
    command = [*tool, sys.executable, "-m", "benchmarks.instructions", "--child", name, str(calls),
               "--without", *without]
    return subprocess.run(command, capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": "0"}).stderr


def instructions(name: str, calls: int, without: list[str]) -> float:
    """Instructions per call of contender ``name``, with the layers ``without`` names switched off."""
    def count(n: int) -> int:
        found = re.search(r"Collected : (\d+)", _run(["valgrind", "--tool=callgrind",
                                                      "--callgrind-out-file=/dev/null"], name, n, without))
        assert found is not None, "callgrind printed no total"
        return int(found.group(1))

    return (count(calls) - count(0)) / calls


def syscalls(name: str, calls: int, without: list[str]) -> dict[str, float]:
    """System calls per call of contender ``name``, by name (those made at least once every 100 calls)."""
    def count(n: int) -> Counter[str]:
        with tempfile.NamedTemporaryFile(suffix=".strace") as out:
            _run(["strace", "-f", "-c", "-o", out.name], name, n, without)
            rows = (line.split() for line in Path(out.name).read_text().splitlines())
            return Counter({row[-1]: int(row[3]) for row in rows if len(row) >= 5 and row[0][0].isdigit()})

    made = count(calls)
    made.subtract(count(0))
    return {call: n / calls for call, n in made.most_common() if call != "total" and n / calls >= 0.01}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--only", nargs="*", default=["bare", "full", "hit"], choices=list(TEMPLATES))
    parser.add_argument("--syscalls", action="store_true", help="also count system calls (strace)")
    parser.add_argument("--without", nargs="*", default=[], metavar="LAYER",
                        help="built-in middleware to switch off (a layer's share is the difference)")
    parser.add_argument("--child", nargs=2, metavar=("NAME", "CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]), args.without)
        return
    tools = ["valgrind"] + (["strace"] if args.syscalls else [])
    if missing := [tool for tool in tools if shutil.which(tool) is None]:
        parser.error(f"needs {' and '.join(missing)} on PATH")
    print("| contender | instructions per call |" + (" system calls per call |" if args.syscalls else ""))
    print("|---|---|" + ("---|" if args.syscalls else ""))
    for name in args.only:
        row = f"| {name} | {instructions(name, args.calls, args.without):,.0f} |"
        if args.syscalls:
            made = syscalls(name, args.calls, args.without)
            row += " " + ", ".join(f"{call} {n:.2f}" for call, n in made.items()) + " |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
