"""The gateway's error table: each error of the provmw tree to the status the SDKs act on, and the
retry headers; a stream that fails after its first byte ends in the wire's in-band error event."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from provmw import errors as e
from provmw.gateway.errors import SHARED_STATE_RETRY_S, Own, refusal_of, retry_headers
from provmw.testing import FakeProvider, Fault
from tests.gateway.test_server import Running, running_gateway

TABLE = [
    (e.BudgetExceededError("key:abc", limit=1, spent=1, reserved=0, period="day"), 429),
    (e.LocalRateLimitError("slow down", limit="requests_per_minute", config_id="c", retry_after_s=2.0), 429),
    (e.RateLimitError("throttled", status=429, retry_after_s=1.0), 429),
    (e.RateLimitError("no quota", status=429, code="insufficient_quota"), 503),
    (e.CircuitOpenError("chat", 5.0), 503),
    (e.PoolUnavailableError("pool", 3.0, "cooling down"), 503),
    (e.ProviderUnavailableError("down", status=503), 503),
    (e.BudgetUnavailableError("budget store down"), 503),
    (e.FallbackExhaustedError([e.FallbackAttempt("a", e.ProviderUnavailableError("down", retry_after_s=4.0))]), 503),
    (e.FallbackExhaustedError([e.FallbackAttempt("a", e.InvalidRequestError("bad", status=400))]), 400),
    (e.ConfigurationError("messages must be a list"), 400),
    (e.GuardRefusedError("no", rule="iban"), 400),
    (e.ContextLengthExceededError("too long", status=400), 400),
    (e.AuthenticationError("bad key sk-123", status=401), 502),
    (e.MalformedResponseError("not json"), 502),
    (e.ProviderTimeoutError("slow", status=504), 504),
    (e.DeadlineExceededError(10.0, 10.5), 504),
    (RuntimeError("secret internals"), 500),
]


@pytest.mark.parametrize(("error", "status"), TABLE, ids=[type(error).__name__ for error, _ in TABLE])
def test_each_error_has_its_status(error: BaseException, status: int) -> None:
    assert refusal_of(error).status == status


def test_a_refusal_by_the_callers_own_budget_names_its_bucket_and_asks_for_no_retry() -> None:
    refusal = refusal_of(e.BudgetExceededError("key:abc", limit=1, spent=1, reserved=0, period="day"),
                         Own(buckets=frozenset({"key:abc"})))
    assert "key:abc" in refusal.message and retry_headers(refusal)["x-should-retry"] == "false"


def test_a_refusal_by_a_shared_budget_says_only_when_it_resets() -> None:
    exhausted = e.BudgetExceededError("global:*", limit=7, spent=9, reserved=0, period="day",
                                      resets_at="2999-01-01T00:00:00+00:00")
    refusal = refusal_of(exhausted, Own(buckets=frozenset({"key:abc"})))
    assert refusal.message == "budget exhausted; it resets at 2999-01-01T00:00:00+00:00" and refusal.retry_after_s


def test_a_local_rate_limit_says_when_to_retry() -> None:
    refusal = refusal_of(e.LocalRateLimitError("slow", limit="requests_per_minute", config_id="c", retry_after_s=1.5))
    assert retry_headers(refusal) == {"retry-after-ms": "1500", "retry-after": "2"}


def test_an_unavailable_fallback_chain_retries_after_its_soonest_member() -> None:
    attempts = [e.FallbackAttempt("a", e.CircuitOpenError("a", 9.0)),
                e.FallbackAttempt("b", e.ProviderUnavailableError("down", retry_after_s=4.0))]
    assert refusal_of(e.FallbackExhaustedError(attempts)).retry_after_s == 4.0


@pytest.mark.parametrize("error", [e.AuthenticationError("bad key sk-123", status=401), RuntimeError("internals")])
def test_nothing_internal_is_shown(error: BaseException) -> None:
    message = refusal_of(error).message
    assert "sk-123" not in message and "internals" not in message


@pytest.fixture
async def gw(fake: FakeProvider, tmp_path: Path) -> AsyncIterator[Running]:
    async with running_gateway(fake, tmp_path) as running:
        yield running


async def test_an_openai_stream_cut_after_its_first_chunk_ends_in_an_error_event(gw: Running) -> None:
    gw.fake.script(Fault(stream_error_after=3))
    client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)
    stream = await client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "a b c d e"}],
                                                  stream=True)
    with pytest.raises(openai.APIError):
        async for _ in stream:
            pass


async def test_an_anthropic_stream_cut_after_its_first_chunk_ends_in_an_error_event(gw: Running) -> None:
    gw.fake.script(Fault(stream_error_after=4))
    client = anthropic.AsyncAnthropic(base_url=gw.url, api_key=gw.key, max_retries=0)
    async with client.messages.stream(model="claude", max_tokens=50,
                                      messages=[{"role": "user", "content": "a b c d e"}]) as stream:
        with pytest.raises(anthropic.APIStatusError):
            await stream.get_final_message()


async def _raw(gw: Running, method: str, path: str, **headers: str) -> tuple[int, dict[str, Any], Any]:
    async with aiohttp.ClientSession() as session, session.request(method, f"{gw.url}{path}",
                                                                    headers=headers) as response:
        return response.status, dict(response.headers), await response.json(content_type=None)


async def test_an_unknown_route_is_404_in_openais_envelope(gw: Running) -> None:
    status, _, body = await _raw(gw, "POST", "/v1/no-such-thing")
    assert status == 404 and body["error"]["code"] == "not_found"


async def test_a_wrong_method_is_405_in_openais_envelope_with_the_methods_allowed(gw: Running) -> None:
    status, headers, body = await _raw(gw, "GET", "/v1/chat/completions")
    assert status == 405 and body["error"]["type"] == "invalid_request_error" and headers["Allow"] == "POST"


async def test_a_wrong_method_on_the_messages_path_is_in_anthropics_envelope(gw: Running) -> None:
    status, _, body = await _raw(gw, "GET", "/v1/messages")
    assert status == 405 and body["type"] == "error" and body["error"]["type"] == "invalid_request_error"


def test_an_upstream_error_says_one_fixed_sentence_without_the_operators_internals() -> None:
    error = e.InvalidRequestError("404 from http://10.0.0.7/v1/chat", provider="openai", model="gpt-secret", status=404)
    message = refusal_of(error).message
    assert "10.0.0.7" not in message and "gpt-secret" not in message and "openai" not in message


def test_a_validation_error_names_the_requests_own_fields_and_nothing_else() -> None:
    error = e.ConfigurationError("temperature must be at most 2 (configuration 'internal-eu' at http://10.0.0.7)")
    refusal = refusal_of(error, Own(fields=("model", "temperature")))
    assert refusal.message == "the request is invalid (see temperature)" and refusal.param == "temperature"


def test_a_shared_state_outage_is_503_with_retry_after_and_no_store_address() -> None:
    refusal = refusal_of(e.BudgetUnavailableError("budget: the store could not reserve (redis://10.0.0.9:6379)"))
    assert refusal.status == 503 and refusal.retry_after_s == SHARED_STATE_RETRY_S and "redis" not in refusal.message


async def test_a_key_store_outage_says_when_to_retry(gw: Running) -> None:
    await gw.keys.aclose()  # the key was never verified: nothing cached
    status, headers, body = await _raw(gw, "POST", "/v1/chat/completions", authorization=f"Bearer {gw.key}")
    assert status == 503 and headers["Retry-After"] == "1" and body["error"]["code"] == "service_unavailable"


@pytest.mark.parametrize("given", [5, None, {"a": 1}], ids=["number", "null", "object"])
async def test_an_embedding_input_of_the_wrong_type_is_400_naming_it(gw: Running, given: object) -> None:
    async with aiohttp.ClientSession() as session, session.post(
            f"{gw.url}/v1/embeddings", json={"model": "chat", "input": given},
            headers={"authorization": f"Bearer {gw.key}"}) as response:
        assert response.status == 400 and (await response.json())["error"]["param"] == "input"
