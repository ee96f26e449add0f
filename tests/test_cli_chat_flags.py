"""``provmw chat`` flags (--user, --tenant, --option, --stream) and what ``-v`` shows."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from pathlib import Path

import pytest

import provmw
from provmw.cli import main
from provmw.testing import FakeProvider, Fault


def settings_file(fake: FakeProvider, tmp_path: Path) -> str:
    path = tmp_path / "provmw.toml"
    path.write_text(f'[configurations.a]\nprovider = "openai"\nmodel = "m"\nbase_url = "{fake.openai_base_url}"\n'
                    "[middleware.retry]\nbase_s = 0.001\n")
    return str(path)


def priced_settings_file(fake: FakeProvider, tmp_path: Path) -> str:
    path = Path(settings_file(fake, tmp_path))
    price = "[configurations.a.price]\ninput_usd_per_mtok = 1000\noutput_usd_per_mtok = 2000\n"
    path.write_text(path.read_text() + price)
    return str(path)


async def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = await asyncio.to_thread(main, list(argv), out)
    return status, out.getvalue()


async def verbose_stderr(*argv: str) -> str:
    """``provmw -v ...`` in its own process (logging set up as a user's would be), no plugins."""
    env = {**os.environ, "PYTHONPATH": str(Path(provmw.__file__).parents[1]), "PROVMW_DISABLE_PLUGIN_AUTOLOAD": "1"}
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "provmw.cli", "-v", *argv, env=env,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await process.communicate()
    return err.decode()


async def test_verbose_logs_a_successful_attempt_without_any_plugin(fake: FakeProvider, tmp_path: Path) -> None:
    err = await verbose_stderr("--config", settings_file(fake, tmp_path), "chat", "hi")
    assert "INFO provmw.attempts: attempt: configuration=a provider=openai model=m ok in " in err


async def test_verbose_logs_a_failed_attempt_and_names_the_retried_configuration(
        fake: FakeProvider, tmp_path: Path) -> None:
    fake.script(Fault(status=503))
    err = await verbose_stderr("--config", settings_file(fake, tmp_path), "chat", "hi")
    assert "attempt: configuration=a provider=openai model=m ProviderUnavailableError (status 503) in " in err
    assert "retry: attempt 1 failed on configuration=a with ProviderUnavailableError" in err
    assert "attempt: configuration=a provider=openai model=m ok in " in err


async def test_user_and_tenant_reach_the_usage_ledger(fake: FakeProvider, tmp_path: Path) -> None:
    config = settings_file(fake, tmp_path)
    await run("--config", config, "chat", "hi", "--user", "ada", "--tenant", "acme")
    _, by_user = await run("--config", config, "usage", "--group-by", "user", "--format", "csv")
    _, by_tenant = await run("--config", config, "usage", "--group-by", "tenant", "--format", "csv")
    assert "\nada," in by_user and "\nacme," in by_tenant


async def test_option_values_are_json_when_they_parse_else_strings(fake: FakeProvider, tmp_path: Path) -> None:
    status, text = await run("--config", settings_file(fake, tmp_path), "chat", "hello there",
                             "--option", "max_tokens=1", "--option", "stop=END")
    assert status == 0 and text.splitlines()[0] == "echo:"
    assert fake.received[-1].body["max_tokens"] == 1 and fake.received[-1].body["stop"] == "END"


async def test_stream_prints_the_answer_and_its_usage(fake: FakeProvider, tmp_path: Path) -> None:
    status, text = await run("--config", settings_file(fake, tmp_path), "chat", "hello stream", "--stream")
    assert status == 0
    assert text.splitlines() == ["echo: hello stream ", "-- served_by=a tokens in=2 out=3 cost=unpriced streamed"]
    assert fake.received[-1].body["stream"] is True


async def test_stream_prints_its_cost(fake: FakeProvider, tmp_path: Path) -> None:
    config = priced_settings_file(fake, tmp_path)
    _, text = await run("--config", config, "chat", "hello stream", "--stream")
    _, unary = await run("--config", config, "chat", "hello stream")
    cost = unary.splitlines()[-1].split(" cost=")[1].split(" ")[0]
    assert text.splitlines()[-1] == f"-- served_by=a tokens in=2 out=3 cost={cost} streamed"


@pytest.mark.parametrize(("option", "named"), [("max_tokens", "expected KEY=VALUE, got 'max_tokens'"),
                                               ("=3", "expected KEY=VALUE, got '=3'")])
async def test_a_malformed_option_is_a_configuration_error(option: str, named: str, fake: FakeProvider,
                                                            tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _ = await run("--config", settings_file(fake, tmp_path), "chat", "hi", "--option", option)
    assert status == 2
    assert f"ConfigurationError: --option: {named}" in capsys.readouterr().err
