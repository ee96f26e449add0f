from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from provmw.cli import main
from provmw.cli.demo import run_demo
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
    assert "providers: anthropic, cohere, openai" in text


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
    assert "skipped: no" not in text


def test_the_demo_refuses_mallory_before_any_request_and_reads_the_ledger_back() -> None:
    out = io.StringIO()
    asyncio.run(run_demo(out, PluginHost(PluginPolicy(autoload=False), environ={})))
    text = out.getvalue()
    assert "BudgetExceededError: budget 'user:mallory'" in text
    assert "requests sent for it: 0" in text
    header = next(line for line in text.splitlines() if line.split()[:2] == ["configuration", "calls"])
    assert header.split() == ["configuration", "calls", "attempts", "input_tokens", "output_tokens", "cost_usd",
                              "cache_hits", "errors", "billed_unknown"]
    assert "40 ledger records" in text  # 30 requests and a cache hit, 7 beyond chat, 2 through the gateway


def test_the_demo_explains_its_ledger_count_from_what_it_did() -> None:
    out = io.StringIO()
    asyncio.run(run_demo(out, PluginHost(PluginPolicy(autoload=False), environ={})))
    found = re.search(r"(\d+) ledger records.*\n.*= (\d+) requests .* \+ (\d+) cache hit.* = (\d+)$",
                      out.getvalue(), re.M)
    assert found, out.getvalue()[-600:]
    records, requests, hits, expected = map(int, found.groups())
    assert (requests, hits) == (39, 1) and records == expected == requests + hits


def test_the_demo_says_the_backup_is_named_not_failed_over_to() -> None:
    out = io.StringIO()
    asyncio.run(run_demo(out, PluginHost(PluginPolicy(autoload=False), environ={})))
    step_two = out.getvalue().split("== 2.", 1)[1].split("== 3.", 1)[0]
    assert "configuration='backup'" in step_two and "not a failover" in step_two


def test_the_demo_streams_from_the_backup_after_the_primary_fails_before_its_first_token() -> None:
    out = io.StringIO()
    asyncio.run(run_demo(out, PluginHost(PluginPolicy(autoload=False), environ={})))
    step_three = out.getvalue().split("== 3.", 1)[1].split("== 4.", 1)[0]
    assert "requests: 3 to the primary, 1 to the backup" in step_three
    assert "'echo: stream this answer'" in step_three


def test_the_demo_says_its_ledger_is_temporary() -> None:
    out = io.StringIO()
    asyncio.run(run_demo(out, PluginHost(PluginPolicy(autoload=False), environ={})))
    assert "provmw.sqlite3 in a temporary folder, deleted when the demo ends" in out.getvalue()


LEDGER_TOML = """
[middleware.usage]
path = "ledger.sqlite3"

[middleware.budget]
path = "ledger.sqlite3"
timezone = "America/Los_Angeles"

[[middleware.budget.limits]]
scope = "global"
period = "day"
max_cost_usd = 1.0
"""


async def write_ledger(fake: FakeProvider, tmp_path: Path) -> Path:
    """Make three calls (one a cache hit) through a manager configured by a TOML file."""
    from provmw.manager import ServiceManager

    config = tmp_path / "provmw.toml"
    config.write_text('default = "a"\n' + LEDGER_TOML + f"""
[configurations.a]
provider = "openai"
model = "gpt-4o-mini"
base_url = "{fake.openai_base_url}"
options = {{ max_tokens = 100 }}

[configurations.e]
provider = "openai"
model = "text-embedding-3-small"
base_url = "{fake.openai_base_url}"
""")
    async with ServiceManager.from_file(config, host=PluginHost(PluginPolicy(autoload=False), environ={})) as m:
        await m.chat("hello", user="ada")
        await m.embed("x", user="bob", configuration="e")
        await m.embed("x", user="bob", configuration="e")
    return config


async def test_usage_groups_the_ledger_by_user(fake: FakeProvider, tmp_path: Path) -> None:
    config = await write_ledger(fake, tmp_path)
    status, text = await asyncio.to_thread(run, "--config", str(config), "usage", "--group-by", "user")
    assert status == 0
    rows = {line.split()[0]: line.split() for line in text.splitlines()[1:]}
    assert rows["ada"][1:3] == ["1", "1"] and rows["bob"][1:3] == ["2", "1"]
    assert rows["bob"][6] == "1"  # one cache hit


async def test_usage_as_json_and_csv(fake: FakeProvider, tmp_path: Path) -> None:
    config = await write_ledger(fake, tmp_path)
    _, text = await asyncio.to_thread(run, "--config", str(config), "usage", "--format", "json",
                                      "--group-by", "configuration")
    rows = {row["configuration"]: (row["calls"], row["attempts"], row["cache_hits"]) for row in json.loads(text)}
    assert rows == {"a": (1, 1, 0), "e": (2, 1, 1)}
    _, text = await asyncio.to_thread(run, "--config", str(config), "usage", "--format", "csv", "--since", "1d")
    assert text.splitlines()[0].startswith("day,calls,attempts,")


async def test_usage_says_on_stderr_when_records_wait_in_the_spill_file(
        fake: FakeProvider, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = await write_ledger(fake, tmp_path)
    (tmp_path / "ledger.sqlite3.spill").write_text("")
    _, text = await asyncio.to_thread(run, "--config", str(config), "usage", "--format", "json")
    assert json.loads(text) and "wait in" in capsys.readouterr().err


async def test_budget_lists_each_bucket_with_its_spend_and_reset(fake: FakeProvider, tmp_path: Path) -> None:
    config = await write_ledger(fake, tmp_path)
    status, text = await asyncio.to_thread(run, "--config", str(config), "budget", "--format", "json")
    assert status == 0
    [row] = json.loads(text)
    assert (row["scope"], row["max_cost_usd"], row["requests"], row["reserved_usd"]) == ("global", 1.0, 2, 0.0)
    assert row["spent_usd"] > 0 and row["resets_at"].endswith(("-08:00", "-07:00"))


def test_usage_with_a_bad_since_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ledger.sqlite3").touch()
    (tmp_path / "provmw.toml").write_text(LEDGER_TOML)
    status, _ = run("--config", str(tmp_path / "provmw.toml"), "usage", "--since", "last tuesday")
    assert status == 2
    assert "--since: expected 7d" in capsys.readouterr().err


def test_usage_without_a_ledger_says_so_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, text = run("usage")
    assert (status, text) == (0, "(nothing recorded)\n")
    ledger = tmp_path / "xdg-data" / "provmw" / "provmw.sqlite3"  # no settings file: the user's data folder
    assert capsys.readouterr().err == f"provmw: no usage ledger at {ledger} yet\n"


@pytest.mark.parametrize("command", ["usage", "budget"])
def test_json_on_a_fresh_install_is_an_empty_list(tmp_path: Path, command: str) -> None:
    status, text = run(command, "--format", "json")
    assert (status, json.loads(text)) == (0, [])


def test_budget_json_without_limits_is_an_empty_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, text = run("budget", "--format", "json")
    assert (status, json.loads(text)) == (0, [])
    assert "no budget limits are configured" in capsys.readouterr().err


def test_budget_json_before_the_store_exists_is_an_empty_list(tmp_path: Path) -> None:
    (tmp_path / "provmw.toml").write_text(LEDGER_TOML)
    status, text = run("--config", str(tmp_path / "provmw.toml"), "budget", "--format", "json")
    assert (status, json.loads(text)) == (0, [])


def test_the_demo_calls_each_installed_provider_plugins_wire_through_the_same_stack() -> None:
    out = io.StringIO()
    status = asyncio.run(run_demo(out, PluginHost(PluginPolicy(allow=("gemini", "azure")), environ={})))
    step_eight = out.getvalue().split("== 8.", 1)[1]
    assert status == 0
    assert "served_by=gemini" in step_eight and "served_by=azure" in step_eight


def test_the_demo_says_why_it_shows_no_span_tree_and_how_to_get_one() -> None:
    out = io.StringIO()
    asyncio.run(run_demo(out, PluginHost(PluginPolicy(allow=("calllog",)), environ={})))
    step_four = out.getvalue().split("== 4.", 1)[1].split("== 5.", 1)[0]
    assert "(no span tree: the `otel` plugin is not in the plugin allowlist)" in step_four


def test_the_demo_calls_every_operation_beyond_chat_each_priced() -> None:
    out = io.StringIO()
    assert main(["demo"], out=out) == 0
    told = out.getvalue().split("== 10.")[1].split("== Usage")[0]
    answers = [line for line in told.splitlines() if line.startswith("   -> ")]
    assert len(answers) == 7 and all("cost=$" in line for line in answers)
    assert "image:1024x1024:hd=1" in told and "search_unit=1" in told and "flagged" in told


def test_the_demo_serves_the_openai_sdk_through_the_gateway_until_the_keys_budget_refuses() -> None:
    out = io.StringIO()
    asyncio.run(run_demo(out, PluginHost(PluginPolicy(autoload=False), environ={})))
    told = out.getvalue().split("== 11.")[1].split("== Usage")[0]
    answers = [line for line in told.splitlines() if line.startswith("   openai SDK -> ")]
    assert [line.split(" -> ")[1][:6] for line in answers] == ["'echo:", "'echo:", "RateLi"]
    assert "429: budget 'key:" in answers[2] and "pmk_" not in told
