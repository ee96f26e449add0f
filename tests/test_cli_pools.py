"""What the command line says about deployment pools: ``stack`` and ``check`` show them, ``check``
flags what it can see wrong, ``usage --group-by pool`` maps the ledger's deployments to their pools,
and the demo's pool step tells its story."""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from provmw.cli import main
from provmw.cli.demo import run_demo
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import load_settings
from provmw.testing import FakeProvider, Fault
from tests.test_readme import block

POOLED = """
[plugins]
autoload = false

[middleware.usage]
path = "ledger.sqlite3"

[middleware.retry]
base_s = 0.001
max_wait_s = 0.01

[configurations.a]
provider = "openai"
model = "dep-a"
base_url = "{url}"
price = {{ input_usd_per_mtok = 1, output_usd_per_mtok = 2 }}

[configurations.b]
provider = "openai"
model = "dep-b"
base_url = "{url}"
price = {{ input_usd_per_mtok = 1, output_usd_per_mtok = 2 }}

[configurations.solo]
provider = "openai"
model = "solo-model"
base_url = "{url}"
price = {{ input_usd_per_mtok = 1, output_usd_per_mtok = 2 }}

[pools.gpt]
strategy = "order"
members = ["a", "b"]
rpm = {{ b = 100 }}
fallbacks = ["solo"]

[pools.gpt.deployments.c]
base = "a"
model = "unpriced-model"

[pools.both]
strategy = "weighted"
members = ["b"]

[aliases]
gpt4 = "gpt"
"""


def settings_file(tmp_path: Path, url: str = "http://127.0.0.1:9/v1", extra: str = "") -> Path:
    path = tmp_path / "provmw.toml"
    path.write_text(POOLED.format(url=url) + extra)
    return path


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_stack_shows_each_pool_its_strategy_and_deployments_and_the_aliases(tmp_path: Path) -> None:
    status, text = run("--config", str(settings_file(tmp_path)), "stack")
    assert status == 0
    assert "pool gpt: order; falls back to solo\n  a      openai dep-a\n  b      openai dep-b  rpm 100\n" in text
    assert "  gpt/c  openai unpriced-model\n" in text
    assert "pool both: weighted\n  b  openai dep-b  weight 1\n" in text and "alias gpt4 -> gpt\n" in text


def test_check_shows_the_pools_and_notes_an_unpriced_deployment_by_its_pool(tmp_path: Path) -> None:
    status, text = run("--config", str(settings_file(tmp_path)), "check")
    notes = [line for line in text.splitlines() if line.startswith("  note: ")]
    assert status == 0 and "pool gpt: order; falls back to solo" in text
    assert len(notes) == 1, notes  # the deployment, never the pool's own configuration
    assert "[pools.gpt.deployments.c] openai model 'unpriced-model', a deployment of pool 'gpt', has no price" \
        in notes[0] and notes[0].endswith("set [pools.gpt.deployments.c.price]")


def test_check_flags_a_pool_whose_deployments_are_all_inactive(tmp_path: Path) -> None:
    path = settings_file(tmp_path, extra="\n[configurations.off]\nprovider = \"openai\"\nmodel = \"gpt-4o\"\n"
                                         "active = false\n\n[pools.dark]\nmembers = [\"off\"]\n")
    status, text = run("--config", str(path), "check")
    assert status == 1 and "  off  openai gpt-4o  inactive\n" in text
    assert re.search(r"^settings \(1 problem\(s\)\):\n  problem: .*\[pools\.dark\] members: every deployment is "
                     r"inactive \(off: active = false\)", text, re.M), text


async def pool_calls(fake: FakeProvider, tmp_path: Path, *configurations: str) -> dict[str, dict[str, Any]]:
    """One call on each of ``configurations`` (``a`` fails once first), then the ledger by pool."""
    from provmw.manager import ServiceManager

    path = settings_file(tmp_path, fake.openai_base_url)
    fake.script(Fault(status=503), model="dep-a")
    async with ServiceManager.from_file(path, host=PluginHost(PluginPolicy(autoload=False), environ={})) as m:
        for configuration in configurations:
            await m.chat("hi", configuration=configuration)
    status, text = await asyncio.to_thread(run, "--config", str(path), "usage", "--group-by", "pool",
                                           "--format", "json")
    assert status == 0
    return {row["pool"]: row for row in json.loads(text)}


async def test_usage_by_pool_counts_a_call_retried_across_deployments_once(fake: FakeProvider,
                                                                            tmp_path: Path) -> None:
    rows = await pool_calls(fake, tmp_path, "gpt4")  # a: 503, then b: ok
    assert (rows["gpt"]["calls"], rows["gpt"]["attempts"], rows["gpt"]["errors"]) == (1, 2, 1)


async def test_usage_by_pool_counts_a_deployment_in_each_of_its_pools(fake: FakeProvider, tmp_path: Path) -> None:
    rows = await pool_calls(fake, tmp_path, "both")  # served by b, a deployment of gpt too
    assert {pool: row["calls"] for pool, row in rows.items()} == {"both": 1, "gpt": 1}


async def test_usage_by_pool_puts_a_configuration_of_no_pool_under_none(fake: FakeProvider, tmp_path: Path) -> None:
    rows = await pool_calls(fake, tmp_path, "solo", "both")
    assert set(rows) == {"(none)", "both", "gpt"} and rows["(none)"]["calls"] == 1


def test_usage_help_offers_pool_as_a_group(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["usage", "--help"])
    assert ",pool}" in capsys.readouterr().out


@pytest.fixture(scope="module")
def demo() -> str:
    out = io.StringIO()
    assert asyncio.run(run_demo(out, PluginHost(PluginPolicy(autoload=False), environ={}))) == 0
    return out.getvalue().split("== 9.", 1)[1]


def test_the_demo_keeps_each_session_on_one_deployment(demo: str) -> None:
    for session in ("alice", "bob"):
        served = set(re.findall(rf"session={session}\s+turn \d -> served_by=(team-chat/\w+)", demo))
        assert len(served) == 1, demo


def test_the_demo_falls_back_once_the_pool_is_unavailable_with_nothing_sent(demo: str) -> None:
    assert "requests sent to the pool for it: 0: all 3 deployments cool down" in demo
    assert "(PoolUnavailableError)" in demo and "served_by=backup" in demo


def test_the_demo_reports_the_ledger_by_pool(demo: str) -> None:
    assert re.search(r"^\s+team-chat\s+7\s+9\s", demo, re.M), demo


def test_the_readmes_pool_loads_with_three_deployments_and_a_fallback(tmp_path: Path) -> None:
    path = tmp_path / "provmw.toml"
    path.write_text(block("pools.toml"))
    pool = load_settings(path, environ={}).pools["gpt-4o"]
    assert pool.members == ("east", "gpt-4o/west", "gpt-4o/second-org")
    assert (pool.strategy, pool.fallbacks) == ("affinity", ("claude",))


def test_check_names_an_inline_deployments_missing_key_by_its_pool_table(tmp_path: Path) -> None:
    path = settings_file(tmp_path)
    inline = 'model = "unpriced-model"'
    path.write_text(path.read_text().replace(inline, f'{inline}\napi_key_env = "C_KEY"'))
    status, text = run("--config", str(path), "check")
    assert status == 1
    assert "[pools.gpt.deployments.c] api_key_env: environment variable C_KEY is not set" in text
