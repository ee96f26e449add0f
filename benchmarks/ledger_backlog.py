"""The ledger's backlog under sustained load: records neither in the store nor in the spill file yet.

The full default stack (SQLite ledger, write-ahead file) serves ``--concurrency`` workers
calling the loopback server for ``--seconds``; the journal's ``pending`` count is sampled
every ``--every-s``. Goal: under a sustained c=64 load for 60 s it stays under 1,000 records,
and once the load stops every record reaches the store. Script mode::

    python -m benchmarks.ledger_backlog --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import attrs

from benchmarks._loopback import serving
from benchmarks.end_to_end import FULL, _manager, prompt

__all__ = ["Backlog", "sustained"]


@attrs.frozen
class Backlog:
    """What the sampling saw: the pending records at each sample, the calls made, the records stored."""

    samples: tuple[int, ...]
    calls: int
    stored: int

    @property
    def peak(self) -> int:
        return max(self.samples, default=0)


async def sustained(url: str, folder: Path, *, seconds: float, concurrency: int = 64,
                    every_s: float = 0.1) -> Backlog:
    """Run the load for ``seconds`` and sample the journal's backlog; flush, then count what was stored."""
    async with _manager(FULL.format(url=url), folder) as manager:
        journal = manager.state.usage_journal()
        stop_at = time.monotonic() + seconds
        calls = 0

        async def worker() -> None:
            nonlocal calls
            while time.monotonic() < stop_at:
                await manager.chat(prompt(), user="ada", tenant="acme")
                calls += 1

        async def sample() -> list[int]:
            seen = []
            while time.monotonic() < stop_at:
                seen.append(journal.pending)
                await asyncio.sleep(every_s)
            return seen

        sampling = asyncio.ensure_future(sample())
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        samples = await sampling
        await journal.flush()
        stored = len(await journal.store.records())
    return Backlog(tuple(samples), calls, stored)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--every-s", type=float, default=0.1)
    args = parser.parse_args(argv)
    with serving() as url, tempfile.TemporaryDirectory(prefix="provmw-backlog-") as folder:
        found = asyncio.run(sustained(url, Path(folder), seconds=args.seconds, concurrency=args.concurrency,
                                      every_s=args.every_s))
    print(f"{found.calls:,} calls in {args.seconds:g} s at c={args.concurrency}: backlog peak {found.peak:,}, "
          f"median {statistics.median(found.samples or [0]):,.0f} records; {found.stored:,} stored after the flush")
    if found.stored != found.calls:
        sys.exit(f"{found.calls - found.stored} records missing from the store")


if __name__ == "__main__":
    main()
