"""What the calling commands (``provmw chat``, ``embed`` and the operations') share: where a call
goes, its ``--option`` pairs, and the last line that says who served it and what it cost."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, TextIO

from provmw.errors import ConfigurationError

__all__ = ["cost_text", "option_pairs", "target", "usage_line"]


def target(args: argparse.Namespace) -> dict[str, Any]:
    """The call keywords naming where a call goes: a configuration, or a provider and model."""
    found = {"configuration": args.configuration, "provider": args.provider, "model": args.model,
             "base_url": args.base_url}
    return {k: v for k, v in found.items() if v is not None}


def option_pairs(pairs: Sequence[str]) -> dict[str, Any] | None:
    """``--option KEY=VALUE`` pairs; a value is JSON when it parses (0.2, true, ["a"]), else a string."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ConfigurationError(f"--option: expected KEY=VALUE, got {pair!r}")
        if key in options:
            raise ConfigurationError(f"--option: {key!r} is given twice")
        try:
            options[key] = json.loads(text)
        except ValueError:
            options[key] = text
    return options or None


def usage_line(response: Any, out: TextIO) -> None:
    """The last line of a call: who served it, its tokens, the units billed (``units search_unit=1``)
    when there are any, its cost and whether it came from the cache."""
    usage = response.usage
    units = "".join(f" {unit}={count:g}" for unit, count in usage.units.items())
    billed = f" units{units}" if units else ""
    out.write(f"-- served_by={response.served_by} model={response.model} tokens in={usage.input_tokens} "
              f"out={usage.output_tokens}{billed} cost={cost_text(usage)} cached={response.cached}\n")


def cost_text(usage: Any) -> str:
    """A usage's cost as shown (``unpriced`` without one), with what a cache hit saved."""
    from provmw.cli.reports import usd

    cost = "unpriced" if usage.cost_usd is None else usd(usage.cost_usd)
    if usage.saved_cost_usd is not None:
        cost += f" (saved {usd(usage.saved_cost_usd)})"
    return cost
