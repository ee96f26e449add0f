"""The middleware guide's examples run as written: an application's own layer through
``ServiceManager.from_file(middleware=[...])`` and the test module, its fixture included."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

from provmw.testing import FakeProvider
from tests.test_readme import README, environment, first_call_folder

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "plugins" / "middleware.md"


def guide_block(name: str) -> str:
    found = re.search(rf"<!-- guide-test: {re.escape(name)} -->\n```python\n(.*?)\n```", GUIDE.read_text(), re.S)
    assert found, f"the middleware guide has no block marked {name}"
    return found.group(1)


def plugin_module(folder: Path) -> Path:
    found = re.search(r"\[start:plugin-example\] -->\n```python\n(.*?)\n```", README.read_text(), re.S)
    assert found, "README.md has no plugin example"
    (folder / "my_plugin.py").write_text(found.group(1))
    return folder


async def run(folder: Path, *argv: str) -> tuple[int | None, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, *argv, cwd=folder, env=environment(OPENAI_API_KEY="sk-anything"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await process.communicate()
    return process.returncode, out.decode()


async def test_the_guides_test_module_runs_with_the_fixtures_it_defines(tmp_path: Path) -> None:
    (plugin_module(tmp_path) / "test_stamp.py").write_text(guide_block("test_stamp.py"))
    status, out = await run(tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_stamp.py")
    assert status == 0 and "1 passed" in out, out


async def test_the_guides_application_layer_runs_through_from_file(fake: FakeProvider, tmp_path: Path) -> None:
    folder = plugin_module(first_call_folder(tmp_path, fake))
    (folder / "app.py").write_text(guide_block("app.py"))
    status, out = await run(folder, "app.py")
    assert (status, out) == (0, "echo: hi\n")


async def test_the_guides_redacting_layer_sends_placeholders_and_restores_them(fake: FakeProvider,
                                                                              tmp_path: Path) -> None:
    folder = first_call_folder(tmp_path, fake)
    example = guide_block("redact_app.py")
    (folder / "redact_app.py").write_text(example)
    status, out = await run(folder, "redact_app.py")
    assert (status, out) == (0, "echo: write to ada@example.com\n")
    assert fake.received[-1].body["messages"][-1]["content"] == "write to <EMAIL_1>"
    assert len(example.splitlines()) <= 60
