"""What checking the caller's input costs per call on the happy path (issue #16, finding 6).

Goal: under 5 microseconds per call. Each case builds what the ServiceManager builds at its
boundary before the pipeline runs, 1,000 times a round:

- ``named``: a two-message chat with two options on a named configuration (messages,
  parts, the request, and the options checked);
- ``ad-hoc``: the same with the transient configuration an ad-hoc call gets (base URL,
  API key and headers checked);
- ``tools``: a chat with one tool spec (its JSON schema checked).

Run the file against the previous release's code (``PYTHONPATH`` at its checkout) for the
figure without the checks; the difference is what the checks add.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from provmw.config import ProviderConfig, check_options
from provmw.messages import Message, ToolSpec
from provmw.requests import ChatRequest

CALLS = 1_000
OPTIONS = {"temperature": 0.2, "max_tokens": 256}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "maximum": 14}}}


def named() -> object:
    check_options(OPTIONS)
    return ChatRequest((Message.system("Be brief."), Message.user("What is the capital of France?")), options=OPTIONS)


def ad_hoc() -> object:
    named()
    return ProviderConfig.ad_hoc("openai", "gpt-4o-mini", base_url="https://gateway.example.com/v1",
                                 api_key="sk-0123456789abcdef", headers={"X-Team": "search"})


def tools() -> object:
    check_options(OPTIONS)
    return ChatRequest((Message.user("Weather in Paris?"),), tools=(ToolSpec("weather", "Forecast", SCHEMA),),
                       options=OPTIONS)


CASES: dict[str, Callable[[], object]] = {"named": named, "ad-hoc": ad_hoc, "tools": tools}


@pytest.mark.parametrize("case", list(CASES))
def test_boundary_checks_per_call(benchmark: Any, case: str) -> None:
    build = CASES[case]

    def batch() -> None:
        for _ in range(CALLS):
            build()

    benchmark.group = f"caller input at the boundary, 1,000 calls: {case}"
    benchmark(batch)
