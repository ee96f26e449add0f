"""A guard's refusal in the call log: the rule and the stage, never the text it matched."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from provmw_calllog import CallLogMiddleware

from provmw.config import ProviderConfig
from provmw.errors import GuardRefusedError
from provmw.testing import call_context

CONFIG = ProviderConfig(identifier="main", provider="openai", model="m")


async def test_a_refusal_logs_its_rule_and_stage(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="provmw.calls")

    async def refusing(config: ProviderConfig) -> Any:
        raise GuardRefusedError("the guard refused the call's input: rule secret:jwt", rule="secret:jwt")

    with pytest.raises(GuardRefusedError):
        await CallLogMiddleware().handle(call_context(), CONFIG, refusing)
    assert "error=GuardRefusedError rule=secret:jwt stage=input" in caplog.records[0].getMessage()
