"""A ``redis-server`` of a test's own, on a free loopback port with its files in a temporary folder,
that the test kills (-9) and starts again: never the shared server."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

PERSISTENT = ("--appendonly", "yes", "--appendfsync", "always", "--save", "")
FORGETFUL = ("--appendonly", "no", "--save", "")


class OwnServer:
    """``redis-server`` started with ``persistence`` (its command-line options) in ``folder``."""

    def __init__(self, folder: Path, persistence: tuple[str, ...]) -> None:
        if shutil.which("redis-server") is None:
            if os.environ.get("CI") == "true":
                pytest.fail("no redis-server on PATH; CI must run the Redis restart tests")
            pytest.skip("no redis-server on PATH")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.folder, self.persistence = folder, persistence
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                         "--dir", str(self.folder), *self.persistence], stdout=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=1.0)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:  # until it answers (and has loaded its files), polled with a bound
            try:
                if client.ping() and not client.info("persistence").get("loading"):
                    client.close()
                    return
            except redis.ConnectionError:
                assert self.process.poll() is None, "redis-server exited"
            except redis.BusyLoadingError:
                pass
            time.sleep(0.01)
        pytest.fail(f"redis-server on port {self.port} never answered")

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
