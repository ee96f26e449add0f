"""``provmw check`` connects to a PostgreSQL ledger: the real server, and a closed port for one
that cannot be reached (named with its password masked)."""

from __future__ import annotations

import io
import socket
from pathlib import Path

import pytest

from provmw.cli import main

pytestmark = pytest.mark.postgres

SETTINGS = """
[plugins]
allow = ["postgres"]

[configurations.a]
provider = "openai"
model = "m"

[middleware.usage]
store = "{url}"
"""


def check(tmp_path: Path, url: str) -> tuple[int, str]:
    path = tmp_path / "provmw.toml"
    path.write_text(SETTINGS.format(url=url))
    out = io.StringIO()
    return main(["--config", str(path), "check"], out), out.getvalue()


def closed_port() -> int:
    with socket.socket() as probe:  # a port just free: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_a_postgresql_ledger_that_accepts_a_connection_is_no_problem(tmp_path: Path, postgres_url: str) -> None:
    assert check(tmp_path, postgres_url)[0] == 0


def test_a_postgresql_ledger_nobody_listens_for_is_a_ledger_problem_with_its_url_masked(tmp_path: Path) -> None:
    port = closed_port()
    status, printed = check(tmp_path, f"postgresql://ada:s3cret-pass@127.0.0.1:{port}/test")
    assert status == 1 and "ledger (1 problem(s)):" in printed
    assert f"store postgresql://ada:***@127.0.0.1:{port}/test: PostgreSQL cannot be reached" in printed
    assert "s3cret-pass" not in printed


def test_a_missing_database_is_a_ledger_problem(tmp_path: Path, postgres_url: str) -> None:
    status, printed = check(tmp_path, postgres_url.rsplit("/", 1)[0] + "/provmw_no_such_database")
    assert status == 1 and "PostgreSQL cannot be reached" in printed and "provmw_no_such_database" in printed
