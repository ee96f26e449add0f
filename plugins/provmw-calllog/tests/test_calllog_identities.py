"""Who asked, in the call log: user and tenant are redacted like the answer's text, and no value a
caller or provider chose can forge a line or a field; dates are not phone numbers."""

from __future__ import annotations

import datetime
import logging
import shlex
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from provmw_calllog import CallLogMiddleware, escape, redact

from provmw.config import ProviderConfig
from provmw.responses import CompletionResponse
from provmw.testing import call_context

CONFIG = ProviderConfig(identifier="main", provider="openai", model="m")


async def logged_line(caplog: pytest.LogCaptureFixture, model: str = "m", **facts: Any) -> str:
    caplog.set_level(logging.INFO, logger="provmw.calls")

    async def answer(config: ProviderConfig) -> CompletionResponse:
        return CompletionResponse(provider="openai", model=model, served_by=config.identifier, text="ok")

    await CallLogMiddleware().handle(call_context(**facts), CONFIG, answer)
    [record] = caplog.records
    return record.getMessage()


async def test_an_e_mail_as_user_is_redacted(caplog: pytest.LogCaptureFixture) -> None:
    line = await logged_line(caplog, user="ada@example.com")
    assert "user=[email]" in line and "ada@example.com" not in line


async def test_a_phone_number_as_tenant_is_redacted(caplog: pytest.LogCaptureFixture) -> None:
    line = await logged_line(caplog, tenant="+44 20 7946 0958")
    assert "tenant=[phone]" in line and "7946" not in line


async def test_a_newline_in_the_user_cannot_forge_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    line = await logged_line(caplog, user="bob\nINFO provmw.calls call forged chat config=main user=admin")
    assert "\n" not in line
    assert "user=\"bob\\x0aINFO provmw.calls call forged" in line


async def test_a_space_in_the_tenant_cannot_add_a_field(caplog: pytest.LogCaptureFixture) -> None:
    line = await logged_line(caplog, tenant="acme user=admin")
    fields = dict(token.split("=", 1) for token in shlex.split(line) if "=" in token)
    assert (fields["user"], fields["tenant"]) == ("-", "acme user=admin")


async def test_a_model_name_from_the_provider_is_escaped(caplog: pytest.LogCaptureFixture) -> None:
    line = await logged_line(caplog, model="m\r\ncall forged")
    assert "\r" not in line and "\n" not in line and 'model="m\\x0d\\x0acall forged"' in line


@pytest.mark.parametrize("text", ["2026-11-23", "23/11/2026", "23.11.2026", "2026/11/23", "2026-11-23T10:15:00Z",
                                  "2026-11-23 10:15:00+01:00", "2026-11-23T10:15:00.123456"])
def test_dates_and_timestamps_are_not_phone_numbers(text: str) -> None:
    assert redact(f"due {text}, call +1 415 555 0100") == f"due {text}, call [phone]"


@given(st.datetimes(min_value=datetime.datetime(1000, 1, 1)), st.sampled_from(["T", " "]))
def test_no_iso_timestamp_is_redacted(moment: datetime.datetime, separator: str) -> None:
    for text in (moment.date().isoformat(), moment.isoformat(separator), moment.strftime("%d/%m/%Y")):
        assert redact(f"at {text} ok") == f"at {text} ok"


@given(st.text())
def test_an_escaped_value_is_one_printable_token(value: str) -> None:
    token = escape(value)
    assert token.isprintable()
    assert " " not in token or (token.startswith('"') and token.endswith('"'))
