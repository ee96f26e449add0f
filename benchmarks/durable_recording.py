"""What durable recording costs a call at c=1: ``usage`` at a ``synchronous`` setting against no ``usage``.

Both managers call the fake provider on loopback with every other middleware off; rounds of
``--calls`` sequential calls alternate between the two, in turns, so that a shared machine's
drift falls on both. The figure is the median of the paired differences. Goal: at most 50 us
a call at ``normal``. Script mode::

    python -m benchmarks.durable_recording --pairs 30
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from provmw.config import ProviderConfig
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import Settings
from provmw.testing import FakeProvider

__all__ = ["manager", "paired_differences"]

OTHERS_OFF = {name: {"enabled": False} for name in (
    "deadline", "usage_hits", "cache", "budget", "fallback", "rate_limit", "retry", "circuit_breaker", "timeout")}


def manager(fake: FakeProvider, ledger: Path, synchronous: str) -> ServiceManager:
    """``usage`` alone, writing to ``ledger`` at ``synchronous``; ``"off"`` switches ``usage`` off too."""
    config = ProviderConfig(identifier="a", provider="openai", model="m", base_url=fake.openai_base_url,
                            price={"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0})
    usage: dict[str, Any] = ({"enabled": False} if synchronous == "off"
                             else {"path": str(ledger), "synchronous": synchronous})
    settings = Settings(configurations={"a": config}, default="a", middleware={**OTHERS_OFF, "usage": usage})
    return ServiceManager(settings, host=PluginHost(PluginPolicy(autoload=False), environ={}))


async def _round(service: ServiceManager, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        await service.chat("hello")
    return (time.perf_counter() - started) / calls * 1e6


async def paired_differences(folder: Path, *, synchronous: str, pairs: int, calls: int) -> list[float]:
    """Microseconds a call that ``usage`` at ``synchronous`` adds, one figure a pair of rounds."""
    fake = await FakeProvider().start()
    recording, bare = manager(fake, folder / "u.db", synchronous), manager(fake, folder / "off.db", "off")
    try:
        for service in (recording, bare):
            await _round(service, calls)  # warm: connections, the ledger's file
        differences = []
        for pair in range(pairs):
            if pair % 2:
                off, on = await _round(bare, calls), await _round(recording, calls)
            else:
                on, off = await _round(recording, calls), await _round(bare, calls)
            differences.append(on - off)
        return differences
    finally:
        await recording.aclose()
        await bare.aclose()
        await fake.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--calls", type=int, default=256)
    parser.add_argument("--synchronous", choices=("normal", "full"), default="normal")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="provmw-durable-") as folder:
        found = asyncio.run(paired_differences(Path(folder), synchronous=args.synchronous, pairs=args.pairs,
                                               calls=args.calls))
    low, _, high = statistics.quantiles(found, n=4)
    print(f"usage at {args.synchronous}, c=1: {statistics.median(found):.1f} us a call more than none "
          f"(median of {args.pairs} pairs of {args.calls} calls; quartiles {low:.1f}-{high:.1f})")


if __name__ == "__main__":
    main()
