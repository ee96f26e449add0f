"""What the budget store tests share: buckets and limits, what another process reads of a budget
file, and a process killed once it has said it settled."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from provmw.stores.budgets import Amounts, BucketId, Limits

BUCKET = BucketId("user", "ada", "day", "2026-11-24")
OTHER = BucketId("global", "*", "total", "total")
DOLLAR = Limits(cost_micro_usd=1_000_000)
A = Amounts(1_000, 10, 1)  # one call's worst case


def in_file(path: Path) -> tuple[int, int]:
    """What another process reads: the spend, and what the reservations hold (micro-dollars)."""
    connection = sqlite3.connect(path)
    try:
        spent = connection.execute("SELECT COALESCE(SUM(cost_micro_usd), 0) FROM budget_buckets").fetchone()[0]
        held = connection.execute("SELECT COALESCE(SUM(cost_micro_usd), 0) FROM budget_reservations").fetchone()[0]
    finally:
        connection.close()
    return spent, held


def reservation_ids(path: Path) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        return [row[0] for row in connection.execute("SELECT id FROM budget_reservations")]
    finally:
        connection.close()


def kill_once_settled(script: str, path: Path) -> None:
    """Run ``script`` (given the file's path) in a process of its own, and kill -9 it once it prints
    ``settled``."""
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(path)],
                             stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
    assert child.stdout is not None and child.stdout.readline().strip() == "settled"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
