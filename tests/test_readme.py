"""The README's first-call blocks run as written against the fake provider, so they cannot drift."""

from __future__ import annotations

import asyncio
import io
import os
import re
import sys
from pathlib import Path

import pytest

from provmw.cli import main
from provmw.middleware import BUILTINS, section_options
from provmw.settings import load_settings
from provmw.testing import FakeProvider, Fault

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DEFAULT_PORT = "8765"  # what `provmw fake-provider` listens on, and what the README's URLs say


def block(name: str) -> str:
    """The fenced block that follows ``<!-- readme-test: name -->`` in the README."""
    found = re.search(rf"<!-- readme-test: {re.escape(name)} -->\n```\w+\n(.*?)\n```", README.read_text(), re.S)
    assert found, f"README.md has no block marked {name}"
    return found.group(1)


def first_call_folder(folder: Path, fake: FakeProvider) -> Path:
    port = fake.url.rsplit(":", 1)[1]
    for name in ("provmw.toml", "first_call.py"):
        (folder / name).write_text(block(name).replace(f"127.0.0.1:{DEFAULT_PORT}", f"127.0.0.1:{port}"))
    return folder


def environment(**values: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("PROVMW_", "OPENAI_", "ANTHROPIC_"))}
    return {**keep, "PYTHONPATH": str(ROOT), **values}  # this checkout's provmw, not another install


async def test_the_first_call_runs_as_written(fake: FakeProvider, tmp_path: Path) -> None:
    folder = first_call_folder(tmp_path, fake)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "first_call.py", cwd=folder, env=environment(OPENAI_API_KEY="sk-anything"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    assert out.decode().splitlines()[1:] == ["2 vectors", "ad-hoc:openai/gpt-4o-mini"]
    assert (fake.count("chat"), fake.count("embedding"), fake.count("messages")) == (2, 1, 0)


async def test_the_stream_example_fails_over_before_its_first_token(fake: FakeProvider, tmp_path: Path) -> None:
    folder = first_call_folder(tmp_path, fake)
    (folder / "stream.py").write_text(block("stream.py"))
    fake.script(*[Fault(stream_error_after=0, code="overloaded_error")] * 3, model="gpt-4o-mini")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "stream.py", cwd=folder, env=environment(OPENAI_API_KEY="sk-a", ANTHROPIC_API_KEY="sk-b"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    assert out.decode().startswith("echo: Tell me a story") and "cost_usd=" in out.decode()
    assert (fake.count(model="gpt-4o-mini"), fake.count(model="claude-3-5-haiku-latest")) == (3, 1)


async def test_check_names_only_the_fallbacks_missing_key(fake: FakeProvider, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    folder = first_call_folder(tmp_path, fake)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-anything")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    out = io.StringIO()
    status = await asyncio.to_thread(main, ["--config", str(folder / "provmw.toml"), "check"], out)
    assert status == 1 and "ANTHROPIC_API_KEY is not set" in out.getvalue()
    assert out.getvalue().endswith("1 problem(s) found\n")


def test_the_reference_configuration_loads_with_every_section_valid(tmp_path: Path) -> None:
    path = tmp_path / "provmw.toml"
    path.write_text(block("reference.toml"))
    settings = load_settings(path, environ={})
    assert {"primary", "backup"} <= set(settings.configurations)
    for builtin in BUILTINS:
        section_options(settings, builtin)


def test_the_plugin_example_takes_a_priority_provmw_stack_shows_free() -> None:
    found = re.search(r"priority = (\d+)", README.read_text().split("## Write a plugin", 1)[1])
    stack = io.StringIO()
    assert found and main(["stack"], stack) == 0
    taken = {line.split()[0] for line in stack.getvalue().splitlines()[1:] if line.split()[0].isdigit()}
    assert len(taken) > 10 and found.group(1) not in taken


@pytest.mark.parametrize("command", ["chat", "embed"])
def test_the_command_list_gives_the_configuration_option(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    listed = README.read_text().split("## Command line", 1)[1].split("\n\n", 2)[1]
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "[-c CONFIGURATION]" in capsys.readouterr().out  # the README spells it as argparse does
    assert re.search(rf"`provmw {command} TEXT[.]* \[-c CONFIGURATION\]`", listed), listed


async def test_the_tool_round_trip_runs_as_written(fake: FakeProvider, tmp_path: Path) -> None:
    folder = first_call_folder(tmp_path, fake)
    (folder / "tools.py").write_text(block("tools.py"))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "tools.py", cwd=folder, env=environment(OPENAI_API_KEY="sk-anything"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    assert out.decode() == "echo: Paris (tool said: 18 C and sunny in Paris)\n"
    assert fake.received[-1].body["messages"][-1] == {
        "role": "tool", "tool_call_id": "call_0", "content": "18 C and sunny in Paris"}
