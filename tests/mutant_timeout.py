"""A pytest plugin for mutation runs only (``-p tests.mutant_timeout`` in ``[tool.mutmut]``): a test of a
mutant still running after ``LIMIT_S`` seconds of wall time ends the run as a timeout.

A mutant that deadlocks the journal (a wait that is never woken) would otherwise run until mutmut's limit for
the whole set of its tests. Outside a mutant (an ordinary run, mutmut's traced stats run, its clean run) the
plugin does nothing: tracing slows tests, and a clean test must never be stopped.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from types import FrameType

import pytest

__all__ = ["LIMIT_S", "TIMEOUT_EXIT_CODE"]

LIMIT_S = 10.0  # a test takes under 5 s or is marked slow (and not run); a mutant runs without tracing
TIMEOUT_EXIT_CODE = 36  # what mutmut records as "timeout"


def _in_a_mutant() -> bool:
    return "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", "")


def _expire(signum: int, frame: FrameType | None) -> None:
    # The forked child that runs this mutant's tests ends at once: nothing it holds is needed again.
    os._exit(TIMEOUT_EXIT_CODE)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    if not _in_a_mutant():
        yield
        return
    previous = signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
