"""Secrets: each rule finds its kind; ordinary words that share a prefix are not secrets."""

from __future__ import annotations

import pytest
from provmw_guard import SecretScanner

SCANNER = SecretScanner()
ANTHROPIC = "sk-ant-api03-" + "aB3" * 10
OPENAI = "sk-proj-" + "Zx9_" * 8
GITHUB = "ghp_" + "a1B2c3D4e5" * 4
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nAAAB\n-----END RSA PRIVATE KEY-----"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


def rules(text: str) -> list[tuple[str, str]]:
    return [(f.rule, text[f.start:f.end]) for f in SCANNER.find(text)]


@pytest.mark.parametrize(("rule", "value"), [
    ("anthropic_key", ANTHROPIC), ("openai_key", OPENAI), ("aws_access_key_id", "AKIAIOSFODNN7EXAMPLE"),
    ("google_api_key", "AIza" + "SyD3" * 8 + "x9_"), ("github_token", GITHUB),
    ("github_token", "github_pat_" + "11ABCDEFG0" * 3), ("slack_token", "xoxb-1234567890-abcdefghij"),
    ("jwt", JWT), ("private_key", PEM),
])
def test_each_rule_finds_its_secret(rule: str, value: str) -> None:
    assert rules(f"use {value} please") == [(rule, value)]


def test_a_bearer_token_is_the_token_not_the_word() -> None:
    assert rules("Authorization: Bearer abcdEFGH1234ijkl5678") == [("bearer_token", "abcdEFGH1234ijkl5678")]


def test_a_private_key_cut_short_runs_to_the_end_of_the_text() -> None:
    text = "key: -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg"
    assert rules(text) == [("private_key", text[5:])]


@pytest.mark.parametrize("text", [
    "the task-force-coordination-meeting-notes", "sk-learn-compatible-estimator-interface",
    "snake_case_names and __dunder__", "a bearer of good news", "AKIA is four letters",
])
def test_words_sharing_a_prefix_are_not_secrets(text: str) -> None:
    assert rules(text) == []
