"""LiteLLM's proxy (``litellm[proxy]``, the ``peers`` extra) as a peer of ``provmw serve``, in processes of its own.

It lives in a virtualenv of its own (``.venv-peers``), so its pins never touch provmw's. It is
set up with what it can run without its database (PostgreSQL through prisma, whose engines are
downloaded on first use): a master key instead of virtual keys, so no key budgets and no spend
log; router retries (``num_retries: 2``, three attempts as provmw's retry makes), a fallback
model and its cooldowns (its breaker); the cost of every call computed (its
``x-litellm-response-cost`` header). Its access log is off, as the gateway's is, and its model
price map is the one it ships (``LITELLM_LOCAL_MODEL_COST_MAP``), so nothing is fetched.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from benchmarks.gateway_processes import CONFIGURATIONS, ROOT

__all__ = ["INSTALL", "MASTER_KEY", "executable", "proxy"]

MASTER_KEY = "sk-bench-master"
INSTALL = ("LiteLLM's proxy is not installed: `./dev bench-peers` installs the peers extra's pin into .venv-peers "
           "and runs this benchmark; or set PROVMW_LITELLM to a `litellm` executable")
START_TIMEOUT_S = 180.0


def executable() -> Path | None:
    """The ``litellm`` executable: ``$PROVMW_LITELLM``, else ``.venv-peers/bin/litellm``; None if neither is."""
    path = Path(os.environ.get("PROVMW_LITELLM") or ROOT / ".venv-peers" / "bin" / "litellm")
    return path if path.is_file() else None


def _config(path: Path, fake_url: str) -> Path:
    """The proxy's config (JSON is YAML) over the fake provider, with the gateway's chat and backup."""
    models = [{"model_name": name, "litellm_params": {"model": f"openai/{CONFIGURATIONS[name][0]}",
                                                      "api_base": f"{fake_url}/v1", "api_key": "sk-bench"}}
              for name in ("chat", "backup")]
    config = {"model_list": models, "router_settings": {"num_retries": 2, "fallbacks": [{"chat": ["backup"]}]},
              "general_settings": {"master_key": MASTER_KEY}}
    (path / "litellm.yaml").write_text(json.dumps(config))
    (path / "litellm-log.json").write_text(json.dumps({"version": 1, "disable_existing_loggers": False,
                                                       "loggers": {"uvicorn.access": {"level": "WARNING"}}}))
    return path / "litellm.yaml"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_live(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, "LiteLLM's proxy exited before it listened"
        with contextlib.suppress(OSError, urllib.error.URLError), \
                urllib.request.urlopen(f"{url}/health/liveliness", timeout=2) as answer:
            if answer.status == 200:
                return
        time.sleep(0.5)
    raise TimeoutError(f"LiteLLM's proxy did not listen within {START_TIMEOUT_S:.0f} s")


@contextlib.contextmanager
def proxy(litellm: Path, fake_url: str, path: Path, workers: int) -> Iterator[tuple[str, int]]:
    """LiteLLM's proxy with ``workers`` workers over the fake at ``fake_url``, its files and log in
    ``path``; its URL and process id (its workers are that process's children)."""
    config, port = _config(path, fake_url), _free_port()
    command = [str(litellm), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
               "--num_workers", str(workers), "--telemetry", "False", "--log_config", str(path / "litellm-log.json")]
    with (path / "litellm.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                   env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    try:
        _wait_live(f"http://127.0.0.1:{port}", process)
        yield f"http://127.0.0.1:{port}", process.pid
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # its own session: the uvicorn parent and its workers
        process.wait(timeout=60)
