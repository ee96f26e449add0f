"""Entra ID tokens: cached, refreshed before expiry on the injected clock, once for many callers."""

from __future__ import annotations

import asyncio
import logging
import traceback

import pytest
from provmw_azure import AzureOpenAIAdapter, TokenCache

from azure_tests.azure_helpers import azure_config
from provmw.errors import AuthenticationError, ProviderError
from provmw.http import HttpClient
from provmw.messages import Message
from provmw.requests import ChatRequest
from provmw.testing import FakeClock, FakeProvider, Fault

HELLO = ChatRequest((Message.user("hello world"),))
LIFETIME_S = 3600.0


class Issuer:
    """A token provider that issues ``tok-1``, ``tok-2``... valid an hour, once ``gate`` is open."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.issued = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self) -> tuple[str, float]:
        await self.gate.wait()
        self.issued += 1
        return f"entra-token-{self.issued:04d}", self.clock() + LIFETIME_S


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1_700_000_000.0)


@pytest.fixture
def issuer(clock: FakeClock) -> Issuer:
    return Issuer(clock)


async def test_a_token_is_reused_until_the_margin_before_expiry(clock: FakeClock, issuer: Issuer) -> None:
    cache = TokenCache(issuer, clock=clock, refresh_margin_s=300)
    first = await cache.token()
    clock.advance(LIFETIME_S - 301)
    assert (await cache.token()) is first
    clock.advance(2)
    assert (await cache.token()).token == "entra-token-0002"


async def test_a_token_shorter_lived_than_twice_the_margin_is_renewed_halfway(clock: FakeClock) -> None:
    async def brief() -> tuple[str, float]:
        return "short-lived", clock() + 60

    cache = TokenCache(brief, clock=clock, refresh_margin_s=300)
    first = await cache.token()
    clock.advance(29)
    assert (await cache.token()) is first
    clock.advance(2)
    assert (await cache.token()) is not first


async def test_concurrent_callers_share_one_refresh(clock: FakeClock, issuer: Issuer) -> None:
    cache = TokenCache(issuer, clock=clock)
    issuer.gate.clear()
    waiting = [asyncio.create_task(cache.token()) for _ in range(20)]
    await asyncio.sleep(0)
    issuer.gate.set()
    tokens = await asyncio.gather(*waiting)
    assert issuer.issued == 1
    assert {t.token for t in tokens} == {"entra-token-0001"}


async def test_the_token_repr_hides_the_token(clock: FakeClock, issuer: Issuer) -> None:
    token = await TokenCache(issuer, clock=clock).token()
    assert "entra-token" not in repr(token)


async def test_a_failing_provider_is_an_authentication_error(clock: FakeClock) -> None:
    async def broken() -> tuple[str, float]:
        raise OSError("no managed identity endpoint")

    with pytest.raises(AuthenticationError, match="OSError: no managed identity endpoint"):
        await TokenCache(broken, clock=clock).token()


@pytest.mark.parametrize("answer", [("", 2e9), ("tok\nen", 2e9), ("token", 1.0), ("token", float("nan")),
                                    ("token", True), (None, 2e9)])
async def test_a_provider_answer_that_cannot_be_used_is_refused(
        clock: FakeClock, answer: tuple[object, object]) -> None:
    async def odd() -> tuple[str, float]:
        return answer  # type: ignore[return-value]

    with pytest.raises(AuthenticationError, match="token provider returned"):
        await TokenCache(odd, clock=clock).token()


async def test_a_configuration_without_a_key_sends_the_bearer_token(
        fake: FakeProvider, http: HttpClient, clock: FakeClock, issuer: Issuer) -> None:
    adapter = AzureOpenAIAdapter(token_provider=issuer, clock=clock)
    await adapter.chat(http, azure_config(fake, api_key=None), HELLO)
    headers = fake.received[-1].headers
    assert headers["Authorization"] == "Bearer entra-token-0001"
    assert "api-key" not in headers


async def test_a_configuration_with_a_key_keeps_it_despite_a_token_provider(
        fake: FakeProvider, http: HttpClient, clock: FakeClock, issuer: Issuer) -> None:
    adapter = AzureOpenAIAdapter(token_provider=issuer, clock=clock)
    await adapter.chat(http, azure_config(fake, api_key="k-123456"), HELLO)
    assert fake.received[-1].headers["api-key"] == "k-123456"
    assert issuer.issued == 0


async def test_calls_refresh_the_token_before_it_expires(
        fake: FakeProvider, http: HttpClient, clock: FakeClock, issuer: Issuer) -> None:
    adapter = AzureOpenAIAdapter(token_provider=issuer, clock=clock, refresh_margin_s=300)
    config = azure_config(fake, api_key=None)
    await adapter.chat(http, config, HELLO)
    clock.advance(LIFETIME_S - 200)  # still valid, but inside the margin
    await adapter.chat(http, config, HELLO)
    sent = [r.headers["Authorization"] for r in fake.received]
    assert sent == ["Bearer entra-token-0001", "Bearer entra-token-0002"]


async def test_concurrent_calls_over_the_wire_ask_for_one_token(
        fake: FakeProvider, http: HttpClient, clock: FakeClock, issuer: Issuer) -> None:
    adapter = AzureOpenAIAdapter(token_provider=issuer, clock=clock)
    config = azure_config(fake, api_key=None)
    issuer.gate.clear()
    calls = [asyncio.create_task(adapter.chat(http, config, HELLO)) for _ in range(10)]
    await asyncio.sleep(0)
    issuer.gate.set()
    answers = await asyncio.gather(*calls)
    assert len(answers) == 10 and issuer.issued == 1
    assert {r.headers["Authorization"] for r in fake.received} == {"Bearer entra-token-0001"}


@pytest.mark.parametrize("fault", [Fault(status=401, message="token entra-token-0001 expired"),
                                   Fault(status=500, message="saw Bearer entra-token-0001")])
async def test_the_token_is_in_no_error_nor_log_line(
        fake: FakeProvider, http: HttpClient, clock: FakeClock, issuer: Issuer,
        caplog: pytest.LogCaptureFixture, fault: Fault) -> None:
    caplog.set_level(logging.DEBUG)
    fake.script(fault)
    adapter = AzureOpenAIAdapter(token_provider=issuer, clock=clock)
    with pytest.raises(ProviderError) as caught:
        await adapter.chat(http, azure_config(fake, api_key=None), HELLO)
    shown = "".join(traceback.format_exception(caught.value)) + repr(caught.value) + str(vars(caught.value))
    assert "entra-token-0001" not in shown + caplog.text
    assert "***" in str(caught.value)
