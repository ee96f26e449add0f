"""Test-suite rules for runs under CI: a service the tests need is never silently skipped.

``in_ci()`` reads ``CI`` as CI services set it (``true``, ``1``, ``yes``, ``on``, any case);
``service_missing(reason)`` is what a fixture calls when its server cannot be reached: the
test skips on a workstation, and fails under CI. This module is also a pytest plugin
(``-p provmw.ci``; provmw's root ``conftest.py`` loads it): under CI it fails a session in
which a test skipped for a missing service, tests of a service (``redis``, ``postgres``
markers) ran and none passed, or no test passed at all. Loads pytest only when used.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import pytest

__all__ = ["SERVICE_MARKERS", "SERVICE_MISSING", "CiGate", "in_ci", "service_missing"]

SERVICE_MISSING = "service missing:"  # how a skip for a missing service starts; the gate looks for it
SERVICE_MARKERS = ("redis", "postgres")
_TRUE = frozenset({"1", "true", "yes", "on", "y", "t"})


def in_ci(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``CI`` holds a true-looking value (``true``, ``True``, ``1``, ``yes``, ``on``)."""
    value = (os.environ if environ is None else environ).get("CI", "")
    return value.strip().lower() in _TRUE


def service_missing(reason: str) -> NoReturn:
    """Skip the calling test because a service is unreachable; under CI, fail it instead."""
    import pytest

    if in_ci():
        pytest.fail(f"{SERVICE_MISSING} {reason}; CI must run these tests (CI={os.environ.get('CI')!r})")
    pytest.skip(f"{SERVICE_MISSING} {reason}")


class CiGate:
    """Counts what passed and what skipped for a missing service; fails the session on any rule."""

    def __init__(self) -> None:
        self.passed = 0
        self.missing: list[str] = []
        self.ran: Counter[str] = Counter()
        self.passed_by_service: Counter[str] = Counter()
        self.problems: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        services = [m for m in SERVICE_MARKERS if m in report.keywords]
        if report.when == "setup":
            self.ran.update(services)
        if report.skipped and SERVICE_MISSING in str(report.longrepr):
            self.missing.append(report.nodeid)
        if report.when == "call" and report.passed:
            self.passed += 1
            self.passed_by_service.update(services)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if session.config.option.collectonly or session.exitstatus not in (0, 5):  # 5: nothing collected
            return
        self.problems = [f"{len(self.missing)} tests skipped for a missing service, e.g. {self.missing[0]}"] \
            if self.missing else []
        self.problems += [f"{self.ran[m]} {m} tests ran and none passed" for m in SERVICE_MARKERS
                          if self.ran[m] and not self.passed_by_service[m]]
        self.problems += ["no test passed"] if not self.passed else []
        if self.problems:
            session.exitstatus = 1  # pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for problem in self.problems:
            terminalreporter.write_line(f"CI: {problem}: a run under CI must not go green by skipping", red=True)


def pytest_configure(config: pytest.Config) -> None:
    """The pytest hook: under CI, register the gate for this session."""
    if in_ci():
        config.pluginmanager.register(CiGate(), "provmw-ci-gate")
