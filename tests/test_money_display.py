"""Money is rounded for reading (6 significant digits, no exponent) and exact everywhere else."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from provmw.cli import main
from provmw.cli.reports import plain, render, usd
from provmw.testing import FakeProvider

TINY = 5.0999999999999995e-06


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_plain_is_six_significant_digits_without_an_exponent(value: float) -> None:
    text = plain(value)
    assert "e" not in text.lower()
    assert float(text) == float(f"{value:.6g}")


def test_usd_prints_a_tiny_cost_in_plain_digits() -> None:
    assert usd(TINY) == "$0.0000051"


def test_the_usage_table_rounds_costs_for_reading() -> None:
    table = render([{"configuration": "a", "cost_usd": TINY}], "table")
    assert table.splitlines()[1].split() == ["a", "0.0000051"]


def test_json_keeps_the_exact_cost() -> None:
    assert json.loads(render([{"cost_usd": TINY}], "json")) == [{"cost_usd": TINY}]


async def test_the_chat_line_prints_the_rounded_cost(fake: FakeProvider, tmp_path: Path) -> None:
    config = tmp_path / "provmw.toml"
    config.write_text(f'[configurations.a]\nprovider = "openai"\nmodel = "m"\nbase_url = "{fake.openai_base_url}"\n'
                      "[configurations.a.price]\ninput_usd_per_mtok = 0.0101\noutput_usd_per_mtok = 0.0101\n")
    out = io.StringIO()
    assert await asyncio.to_thread(main, ["--config", str(config), "chat", "hi"], out) == 0
    cost = out.getvalue().split("cost=")[1].split()[0]
    assert cost.startswith("$0.0000") and "e" not in cost and cost != "$0.000000"
