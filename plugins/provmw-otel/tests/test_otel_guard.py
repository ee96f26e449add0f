"""A guard's refusal on a span: the rule and the stage, never the text it matched."""

from __future__ import annotations

from provmw_otel.attributes import error_attributes

from provmw.errors import GuardRefusedError, ProviderUnavailableError


def test_a_refusal_carries_its_rule_and_stage() -> None:
    refused = error_attributes(GuardRefusedError("refused", rule="deny:no-ssn", stage="output"))
    assert (refused["provmw.guard.rule"], refused["provmw.guard.stage"]) == ("deny:no-ssn", "output")


def test_another_error_carries_no_guard_attributes() -> None:
    assert "provmw.guard.rule" not in error_attributes(ProviderUnavailableError("down"))
