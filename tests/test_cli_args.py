"""The command line's arguments: no abbreviations, and ``--config`` wherever it is written."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from provmw.cli import main
from provmw.testing import FakeProvider


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def settings_file(fake: FakeProvider, path: Path, table: str = "configurations") -> Path:
    path.write_text(f'[{table}.a]\nprovider = "openai"\nmodel = "m"\nbase_url = "{fake.openai_base_url}"\n')
    return path


async def test_config_after_the_command_is_the_settings_file(fake: FakeProvider, tmp_path: Path) -> None:
    config = settings_file(fake, tmp_path / "elsewhere.toml")
    status, text = await asyncio.to_thread(run, "chat", "--config", str(config), "hello")
    assert status == 0
    assert "served_by=a" in text


def test_an_abbreviated_option_is_refused_not_guessed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run("chat", "--conf", "a", "hello")
    assert exited.value.code == 2
    assert "unrecognized arguments: --conf" in capsys.readouterr().err


async def test_config_naming_a_pyproject_reads_its_tool_provmw_table(fake: FakeProvider, tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    pyproject = settings_file(fake, tmp_path / "app" / "pyproject.toml", table="tool.provmw.configurations")
    status, text = await asyncio.to_thread(run, "--config", str(pyproject), "chat", "hello")
    assert status == 0
    assert "served_by=a" in text


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_is_taken_before_or_after_the_command(where: str) -> None:
    from provmw.cli import _parser

    argv = ["-v", "usage"] if where == "before" else ["usage", "-v"]
    assert _parser().parse_args(argv).verbose is True
    assert _parser().parse_args(["usage"]).verbose is False


def budget_file(fake: FakeProvider, path: Path) -> Path:
    settings_file(fake, path)
    path.write_text(path.read_text() + f'[middleware.budget]\npath = "{path.parent / "b.sqlite3"}"\n'
                    '[[middleware.budget.limits]]\nscope = "global"\nperiod = "day"\nmax_requests = 0\n')
    return path


async def test_verbose_prints_no_traceback_for_a_budget_refusal(
        fake: FakeProvider, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = budget_file(fake, tmp_path / "provmw.toml")
    status, _ = await asyncio.to_thread(run, "-v", "--config", str(config), "chat", "hello")
    err = capsys.readouterr().err
    assert status == 2 and "BudgetExceededError: budget 'global:*'" in err
    assert "Traceback" not in err


def test_verbose_prints_no_traceback_for_a_configuration_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _ = run("-v", "--config", str(tmp_path / "missing.toml"), "stack")
    err = capsys.readouterr().err
    assert status == 2 and "ConfigurationError: settings file not found" in err
    assert "Traceback" not in err
