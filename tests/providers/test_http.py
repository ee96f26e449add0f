from __future__ import annotations

import asyncio
import email.utils
import inspect
import socket

import aiohttp
import pytest

from provmw.config import ProviderConfig
from provmw.errors import (
    AuthenticationError,
    InvalidRequestError,
    MalformedResponseError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
)
from provmw.http import (
    EXCEPTION_ERRORS,
    STATUS_ERRORS,
    ErrorCodes,
    HttpClient,
    HttpStatusError,
    NotJsonError,
    retry_hints,
    wire_errors,
)
from provmw.messages import Message
from provmw.providers.openai import ERROR_CODES, OpenAIAdapter
from provmw.requests import ChatRequest, EmbeddingRequest
from provmw.testing import FakeProvider, Fault
from tests.conftest import openai_config

DOCUMENTED = {400: InvalidRequestError, 401: AuthenticationError, 403: AuthenticationError,
              404: InvalidRequestError, 408: ProviderTimeoutError, 409: ProviderUnavailableError,
              413: InvalidRequestError, 422: InvalidRequestError, 429: RateLimitError,
              500: ProviderUnavailableError, 502: ProviderUnavailableError,
              503: ProviderUnavailableError, 504: ProviderTimeoutError, 529: ProviderUnavailableError}


def aiohttp_client_errors() -> list[type[BaseException]]:
    return [c for c in vars(aiohttp).values()
            if inspect.isclass(c) and issubclass(c, aiohttp.ClientError) and c is not aiohttp.ClientError]


def test_status_table_covers_every_documented_status() -> None:
    assert dict(STATUS_ERRORS) == DOCUMENTED


NO_CODES = ErrorCodes(extract=lambda body: (None, None))


def mapped(exc: BaseException, codes: ErrorCodes = NO_CODES) -> ProviderError:
    """What ``wire_errors`` turns ``exc`` into."""
    with pytest.raises(ProviderError) as caught, wire_errors(codes, provider="p", model="m"):
        raise exc
    return caught.value


@pytest.mark.parametrize("status", range(400, 600))
def test_every_error_status_maps_to_a_provider_error(status: int) -> None:
    error = mapped(HttpStatusError(status, b"", {}))
    assert isinstance(error, InvalidRequestError if status < 500 and status not in DOCUMENTED else ProviderError)
    assert error.status == status
    assert str(error) == f"p/m (HTTP {status}): HTTP {status} with no error message"


def test_a_body_that_is_no_json_becomes_the_message() -> None:
    assert mapped(HttpStatusError(502, b"<html>Bad gateway</html>", {})).message == "<html>Bad gateway</html>"


def test_a_2xx_body_that_is_not_json_is_malformed() -> None:
    error = mapped(NotJsonError(200, b"{oops"))
    assert isinstance(error, MalformedResponseError)
    assert (error.message, error.status) == ("response body is not JSON (5 bytes)", 200)


def test_errors_of_the_adapter_pass_through_unchanged() -> None:
    error = MalformedResponseError("missing choices", provider="p", model="m")
    assert mapped(error) is error


def test_cancellation_is_not_translated() -> None:
    with pytest.raises(asyncio.CancelledError), wire_errors(NO_CODES, provider="p", model="m"):
        raise asyncio.CancelledError


@pytest.mark.parametrize("cls", aiohttp_client_errors(), ids=lambda c: c.__name__)
def test_every_aiohttp_client_error_is_mapped_deliberately(cls: type[BaseException]) -> None:
    mapped = next((k for k in cls.__mro__ if k in EXCEPTION_ERRORS), None)
    assert mapped is not None and mapped is not aiohttp.ClientError, cls


def test_exception_table_has_no_catch_all_for_client_error() -> None:
    assert aiohttp.ClientError not in EXCEPTION_ERRORS


def test_foreign_error_message_drops_query_strings() -> None:
    error = mapped(aiohttp.InvalidURL("https://api.example.com/v1/x?key=SECRET123"))
    assert isinstance(error, InvalidRequestError)
    assert "SECRET123" not in str(error)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"retry-after-ms": "nope", "retry-after": "3"}, 3.0),
        ({"retry-after": "-1"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "99999999"}, None),
        ({"retry-after": "Tue, 99 Foo 2026 00:00:00 GMT"}, None),
        ({"retry-after": ""}, None),
        ({}, None),
    ],
)
def test_retry_after_hints(headers: dict[str, str], expected: float | None) -> None:
    assert retry_hints(headers)[0] == expected


def test_retry_after_as_http_date() -> None:
    now = 1_800_000_000.0
    when = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_hints({"retry-after": when}, now=now)[0] == pytest.approx(30.0)


def test_retry_after_date_in_the_past_is_zero() -> None:
    now = 1_800_000_000.0
    assert retry_hints({"retry-after": email.utils.formatdate(now - 30, usegmt=True)}, now=now)[0] == 0.0


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("FALSE", False), ("maybe", None)])
def test_x_should_retry(value: str, expected: bool | None) -> None:
    assert retry_hints({"x-should-retry": value})[1] is expected


ADAPTER = OpenAIAdapter()
CHAT = ChatRequest((Message.user("hi"),))


async def test_quota_exhaustion_is_marked(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=429, code="insufficient_quota"))
    with pytest.raises(RateLimitError) as caught:
        await ADAPTER.chat(http, openai_config(fake), CHAT)
    assert caught.value.quota_exhausted


async def test_retry_hints_travel_on_the_error(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=503, headers={"retry-after-ms": "250", "x-should-retry": "false"}))
    with pytest.raises(ProviderUnavailableError) as caught:
        await ADAPTER.chat(http, openai_config(fake), CHAT)
    assert (caught.value.retry_after_s, caught.value.should_retry) == (0.25, False)


async def test_connection_refused(http: HttpClient) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = ProviderConfig(identifier="x", provider="openai", model="m", base_url=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(ProviderConnectionError, match="refused"):
        await ADAPTER.chat(http, config, CHAT)


async def test_dns_failure(http: HttpClient) -> None:
    config = ProviderConfig(identifier="x", provider="openai", model="m", base_url="http://no-such-host.invalid/v1")
    with pytest.raises(ProviderConnectionError):
        async with asyncio.timeout(5):  # the adapter has no timer; a hung resolver must not hang the test
            await ADAPTER.chat(http, config, CHAT)


async def test_a_unary_call_has_no_timer_of_its_own(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(delay_s=0.3))
    async with asyncio.timeout(5):  # the manager's attempt timeout stands here
        response = await ADAPTER.chat(http, openai_config(fake, timeout_s=0.05), CHAT)
    assert response.text == "echo: hi"


async def test_the_session_has_no_default_timer(http: HttpClient) -> None:
    assert http.session.timeout == aiohttp.ClientTimeout(total=None)


async def test_a_stream_read_is_bounded_by_a_read_timeout_when_given(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(delay_s=0.5))
    events = http.post_sse(f"{fake.openai_base_url}/chat/completions", {"model": "m", "stream": True,
                                                                      "messages": []}, {}, read_timeout_s=0.05)
    with pytest.raises(ProviderTimeoutError), wire_errors(ERROR_CODES, provider="openai", model="m"):
        async for _ in events:
            pass


async def test_one_session_serves_every_call(fake: FakeProvider, http: HttpClient) -> None:
    await ADAPTER.chat(http, openai_config(fake), CHAT)
    session = http.session
    await asyncio.gather(*(ADAPTER.embed(http, openai_config(fake), EmbeddingRequest(("a",)))
                           for _ in range(5)))
    assert http.session is session
