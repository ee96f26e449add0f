from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provmw.cli import main
from provmw.demo import run_demo
from provmw.plugins import PluginHost, PluginPolicy
from provmw.testing import FakeProvider


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_stack_lists_order_priority_and_plugin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PROVMW_PLUGINS", "calllog")
    status, text = run("stack")
    assert status == 0
    assert "     900  call_log          calllog" in text
    assert "providers: anthropic, openai" in text


def test_plugins_lists_distribution_version_status(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PROVMW_BLOCKED_PLUGINS", "calllog")
    status, text = run("plugins")
    assert status == 0
    assert any(line.split()[:4] == ["provmw", "provmw", "0.1.0", "loaded"] for line in text.splitlines())
    assert any(line.split()[:2] == ["calllog", "provmw-calllog"] and line.endswith("blocked")
               for line in text.splitlines())


async def test_chat_and_embed_against_the_fake(fake: FakeProvider, tmp_path: Path) -> None:
    import asyncio

    config = tmp_path / "provmw.toml"
    config.write_text(f'[configurations.a]\nprovider = "openai"\nmodel = "m"\nbase_url = "{fake.openai_base_url}"\n')
    status, text = await asyncio.to_thread(run, "--config", str(config), "chat", "hello cli")
    assert status == 0
    assert text.splitlines()[0] == "echo: hello cli"
    assert "served_by=a" in text
    status, text = await asyncio.to_thread(run, "--config", str(config), "embed", "x", "--dimensions", "3")
    assert status == 0 and "(3 dims)" in text


def test_configuration_error_exits_2_with_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _ = run("--config", str(tmp_path / "missing.toml"), "stack")
    assert status == 2
    assert "ConfigurationError: settings file not found" in capsys.readouterr().err


def test_demo_runs_end_to_end_and_exits_0(tmp_path: Path) -> None:
    env = {**os.environ, "PROVMW_PLUGINS": "calllog"}
    done = subprocess.run([sys.executable, "-m", "provmw.cli", "demo"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "== The stack, outermost first" in done.stdout
    assert "echo: Say hello to provmw" in done.stdout
    assert "Usage by configuration" in done.stdout


def test_the_demo_shows_failover_retry_after_and_a_cache_hit() -> None:
    out = io.StringIO()
    assert asyncio.run(run_demo(out, PluginHost(PluginPolicy(autoload=False), environ={}))) == 0
    text = out.getvalue()
    assert "attempts: primary:503, primary:503, primary:503, backup:ok" in text
    assert "attempts: primary:429, primary:ok" in text
    assert "attempts: primary:429, backup:ok" in text
    assert "served_by=primary cached=True" in text
    assert "skipped: no `fallback`" not in text and "skipped: no `cache`" not in text
