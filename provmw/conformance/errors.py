"""Conformance of failures: the wire's error statuses, codes and retry hints onto the error
tree, bodies that are not JSON, dropped connections, and no error or log line holding the key."""

from __future__ import annotations

import logging
import traceback

import pytest

from provmw.conformance.base import HELLO, ConformanceBase
from provmw.errors import MalformedResponseError, ProviderConnectionError, ProviderError, RateLimitError
from provmw.http import HttpClient
from provmw.testing import FakeProvider, Fault

__all__ = ["SENTINEL_KEY", "ErrorTests"]

SENTINEL_KEY = "sk-CONFORMANCE-9d41-never-in-an-error"

_LEAKY_FAULTS = {"401": Fault(status=401), "500": Fault(status=500), "malformed": Fault(malformed_json=True),
                 "dropped": Fault(drop_connection=True)}


class ErrorTests(ConformanceBase):
    """Every failure of the wire is one typed error of the tree, and none holds the API key."""

    async def test_an_error_status_maps_onto_the_tree(
            self, fake: FakeProvider, http: HttpClient, status: tuple[int, type[ProviderError]]) -> None:
        code, error = status
        fake.script(Fault(status=code, message=f"boom {code}"))
        with pytest.raises(ProviderError) as caught:
            await self.adapter.chat(http, self.config(fake), HELLO)
        assert type(caught.value) is error
        assert (caught.value.status, caught.value.provider) == (code, self.adapter.name)
        assert f"boom {code}" in str(caught.value)

    async def test_an_error_code_in_the_body_refines_the_status(
            self, fake: FakeProvider, http: HttpClient, coded: tuple[str, tuple[Fault, type[ProviderError]]]) -> None:
        _, (fault, error) = coded
        fake.script(fault)
        with pytest.raises(ProviderError) as caught:
            await self.adapter.chat(http, self.config(fake), HELLO)
        assert type(caught.value) is error

    async def test_a_429_says_whether_the_quota_is_gone(
            self, fake: FakeProvider, http: HttpClient, quota: tuple[str, tuple[Fault, bool]]) -> None:
        _, (fault, exhausted) = quota
        fake.script(fault)
        with pytest.raises(RateLimitError) as caught:
            await self.adapter.chat(http, self.config(fake), HELLO)
        assert caught.value.quota_exhausted is exhausted

    async def test_a_retry_hint_arrives_as_retry_after_s(
            self, fake: FakeProvider, http: HttpClient, hint: tuple[str, tuple[Fault, float]]) -> None:
        _, (fault, seconds) = hint
        fake.script(fault)
        with pytest.raises(ProviderError) as caught:
            await self.adapter.chat(http, self.config(fake), HELLO)
        assert caught.value.retry_after_s == seconds

    async def test_a_malformed_2xx_body_is_a_malformed_response(self, fake: FakeProvider, http: HttpClient) -> None:
        fake.script(Fault(malformed_json=True))
        with pytest.raises(MalformedResponseError):
            await self.adapter.chat(http, self.config(fake), HELLO)

    async def test_a_dropped_connection_is_a_connection_error(self, fake: FakeProvider, http: HttpClient) -> None:
        fake.script(Fault(drop_connection=True))
        with pytest.raises(ProviderConnectionError):
            await self.adapter.chat(http, self.config(fake), HELLO)

    @pytest.mark.parametrize("fault", list(_LEAKY_FAULTS.values()), ids=list(_LEAKY_FAULTS))
    async def test_no_error_or_log_line_holds_the_api_key(
            self, fake: FakeProvider, http: HttpClient, caplog: pytest.LogCaptureFixture, fault: Fault) -> None:
        caplog.set_level(logging.DEBUG)
        fake.script(fault)
        with pytest.raises(ProviderError) as caught:
            await self.adapter.chat(http, self.config(fake, api_key=SENTINEL_KEY), HELLO)
        assert SENTINEL_KEY in str(dict(fake.received[-1].headers)), "the adapter did not send the key"
        error = caught.value
        assert SENTINEL_KEY not in "".join(traceback.format_exception(error)) + repr(error) + str(vars(error))
        assert SENTINEL_KEY not in caplog.text
