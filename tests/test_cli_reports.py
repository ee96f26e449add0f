"""What ``provmw usage`` and ``provmw budget`` print: data in JSON, words in the table, one cost in both."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
from pathlib import Path
from typing import Any, cast

import pytest

from provmw.cli import main
from provmw.plugins import PluginHost, PluginPolicy
from provmw.stores.usage.summary import ROW_COLUMNS
from provmw.testing import FakeProvider

SETTINGS = """
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


def run(*argv: str) -> str:
    out = io.StringIO()
    assert main(list(argv), out=out) == 0
    return out.getvalue()


async def calls(fake: FakeProvider, tmp_path: Path, price: str = "") -> Path:
    """Two chat calls through a manager configured by a TOML file, priced as ``price`` says."""
    from provmw.manager import ServiceManager

    config = tmp_path / "provmw.toml"
    config.write_text(SETTINGS + f'[configurations.a]\nprovider = "openai"\nmodel = "gpt-4o-mini"\n'
                      f'base_url = "{fake.openai_base_url}"\noptions = {{ max_tokens = 100 }}\n{price}')
    async with ServiceManager.from_file(config, host=PluginHost(PluginPolicy(autoload=False), environ={})) as m:
        await m.chat("hello there", user="ada")
        await m.chat("hello", user="bob")
    return config


async def only_row(config: Path, *argv: str) -> dict[str, Any]:
    """The one row a report prints as JSON."""
    [row] = json.loads(await asyncio.to_thread(run, "--config", str(config), *argv, "--format", "json"))
    return cast(dict[str, Any], row)


async def test_budget_json_gives_numbers_and_iso_dates(fake: FakeProvider, tmp_path: Path) -> None:
    row = await only_row(await calls(fake, tmp_path), "budget")
    assert (row["scope"], row["subject"], row["period"]) == ("global", "*", "day")
    assert (row["max_cost_usd"], row["max_tokens"], row["max_requests"], row["requests"]) == (1.0, None, None, 2)
    assert dt.date.fromisoformat(row["window"]) <= dt.date.today() + dt.timedelta(days=1)
    assert dt.datetime.fromisoformat(row["resets_at"]).isoformat().endswith(("-08:00", "-07:00"))


async def test_budget_table_reads_as_words(fake: FakeProvider, tmp_path: Path) -> None:
    config = await calls(fake, tmp_path)
    header, line = (await asyncio.to_thread(run, "--config", str(config), "budget")).splitlines()
    assert header.split()[:3] == ["bucket", "period", "limit"]
    bucket, period, window, limit = line.split()[:4]
    assert (bucket, period, limit) == ("global:*", "day", "$1") and dt.date.fromisoformat(window)


async def test_the_budget_and_the_ledger_agree_on_whole_micro_dollar_costs(fake: FakeProvider, tmp_path: Path) -> None:
    price = "[configurations.a.price]\ninput_usd_per_mtok = 1000\noutput_usd_per_mtok = 2000\n"
    config = await calls(fake, tmp_path, price)
    ledger = await only_row(config, "usage", "--group-by", "configuration")
    budget = await only_row(config, "budget")
    assert ledger["cost_usd"] == budget["spent_usd"] > 0


async def test_the_budget_rounds_each_sub_micro_dollar_call_up(fake: FakeProvider, tmp_path: Path) -> None:
    config = await calls(fake, tmp_path)  # gpt-4o-mini: a short chat costs about $0.000002
    ledger = await only_row(config, "usage", "--group-by", "configuration")
    budget = await only_row(config, "budget")
    # Up to one micro-dollar a call (2 here) over the ledger, whose sum is itself rounded to the micro-dollar.
    assert 0 < round((budget["spent_usd"] - ledger["cost_usd"]) * 1e6, 6) <= 2.5


def test_usage_help_explains_every_column(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["usage", "--help"])
    lines = capsys.readouterr().out.split("columns (", 1)[1].splitlines()
    assert [line.split()[0] for line in lines if line.startswith("  ") and not line.startswith("   ")] == \
        list(ROW_COLUMNS)


async def ledger_of_two_keys(tmp_path: Path) -> Path:
    """A settings file whose ledger holds two calls of one key, one of another and a direct call."""
    from provmw.stores.usage import SqliteUsageStore, UsageRecord

    def made(call_id: str, **fields: Any) -> UsageRecord:
        return UsageRecord(call_id=call_id, attempt=1, correlation_id=call_id, timestamp=dt.datetime.now().timestamp(),
                           operation="chat", config_id="a", provider="openai", model="m", cost_usd=0.5, **fields)

    store = SqliteUsageStore(tmp_path / "ledger.sqlite3")
    await store.write([made("c1", key_id="0123456789ab", team="acme/search"),
                       made("c2", key_id="0123456789ab", team="acme/search"),
                       made("c3", key_id="ba9876543210", team="acme/ads"), made("direct")])
    await store.aclose()
    config = tmp_path / "provmw.toml"
    config.write_text(SETTINGS)
    return config


@pytest.mark.parametrize(("group", "expected"), [
    ("key", [("(none)", 1), ("0123456789ab", 2), ("ba9876543210", 1)]),
    ("team", [("(none)", 1), ("acme/ads", 1), ("acme/search", 2)])])
async def test_usage_groups_by_key_and_by_team(tmp_path: Path, group: str, expected: list[tuple[str, int]]) -> None:
    config = await ledger_of_two_keys(tmp_path)
    printed = await asyncio.to_thread(run, "--config", str(config), "usage", "--group-by", group, "--format", "json")
    assert [(row[group], row["calls"]) for row in json.loads(printed)] == expected
