"""``provmw check`` contacts the ``[state]`` Redis: a PING to the real server, a closed port for
one that cannot be reached (named with its password masked)."""

from __future__ import annotations

import io
import socket
from pathlib import Path

import pytest

from provmw.cli import main

pytestmark = pytest.mark.redis

SETTINGS = """
[plugins]
allow = ["redis"]

[configurations.a]
provider = "openai"
model = "m"

[state]
url = "{url}"
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


def test_a_redis_that_answers_the_ping_is_no_problem(tmp_path: Path, redis_url: str) -> None:
    _, printed = check(tmp_path, redis_url)  # the shared server may lack persistence: that is another problem
    assert "cannot be reached" not in printed


def test_a_redis_nobody_listens_for_is_a_state_problem_with_its_url_masked(tmp_path: Path) -> None:
    port = closed_port()
    status, printed = check(tmp_path, f"redis://:s3cret-pass@127.0.0.1:{port}/0")
    assert status == 1 and "state (1 problem(s)):" in printed
    assert f"[state] url redis://:***@127.0.0.1:{port}/0: Redis cannot be reached" in printed
    assert "s3cret-pass" not in printed


def test_a_redis_refusing_the_password_is_a_state_problem(tmp_path: Path, redis_url: str) -> None:
    status, printed = check(tmp_path, redis_url.replace("redis://", "redis://:not-its-password@"))
    assert status == 1 and "Redis cannot be reached" in printed and "not-its-password" not in printed
