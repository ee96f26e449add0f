"""What binding answers and breakers to the credentials costs (SECURITY.md, ADR 0010's amendment).

A named configuration computes its fingerprint once, when it is loaded; an ad-hoc call
builds its configuration, and so its fingerprint, per call. The goal: under 5 µs a call.
"""

from __future__ import annotations

from typing import Any

from provmw.config import ProviderConfig, Secret, fingerprint

KEY = Secret("sk-" + "x" * 48)
HEADERS = {"OpenAI-Organization": "org-1234567890"}


def test_fingerprint_of_a_key_and_headers(benchmark: Any) -> None:
    benchmark(fingerprint, KEY, HEADERS)


def test_an_ad_hoc_configuration_with_its_fingerprint(benchmark: Any) -> None:
    benchmark(ProviderConfig.ad_hoc, "openai", "gpt-4o-mini", api_key=KEY)
