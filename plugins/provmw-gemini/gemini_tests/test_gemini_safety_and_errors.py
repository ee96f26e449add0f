"""Gemini's safety blocks, its error bodies and the retry hint in them, over loopback HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from provmw_gemini import GeminiAdapter
from provmw_gemini.fake import BLOCK_ANSWER, BLOCK_PROMPT

from provmw.config import ProviderConfig
from provmw.errors import ContentPolicyError, ContextLengthExceededError, ProviderUnavailableError, RateLimitError
from provmw.http import HttpClient
from provmw.messages import Message
from provmw.requests import ChatRequest
from provmw.responses import ChatChunk
from provmw.testing import FakeProvider, Fault

ADAPTER = GeminiAdapter()


def asking(text: str) -> ChatRequest:
    return ChatRequest((Message.user(text),))


async def drain(chunks: AsyncIterator[ChatChunk]) -> list[ChatChunk]:
    return [chunk async for chunk in chunks]


async def test_a_blocked_prompt_is_a_content_policy_error_naming_the_reason(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    with pytest.raises(ContentPolicyError) as caught:
        await ADAPTER.chat(client, gemini, asking(f"say something {BLOCK_PROMPT}"))
    assert caught.value.code == "SAFETY"
    assert "prompt: SAFETY (HARM_CATEGORY_HARASSMENT)" in str(caught.value)


async def test_an_answer_stopped_for_safety_is_a_content_policy_error(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    with pytest.raises(ContentPolicyError, match="answer: SAFETY"):
        await ADAPTER.chat(client, gemini, asking(f"go on {BLOCK_ANSWER}"))


async def test_a_stream_stopped_for_safety_raises_after_the_text_it_sent(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    chunks = ADAPTER.stream_chat(client, gemini, asking(f"go on {BLOCK_ANSWER}"))
    first = await anext(chunks)
    with pytest.raises(ContentPolicyError):
        await drain(chunks)
    assert first.text == "echo: "


async def test_retry_info_in_the_body_arrives_as_retry_after_s(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    gemini_fake.script(Fault(status=429, message="You exceeded your current quota. Please retry in 12.5s."))
    with pytest.raises(RateLimitError) as caught:
        await ADAPTER.chat(client, gemini, asking("hi"))
    assert caught.value.retry_after_s == 12.5
    assert (caught.value.code, caught.value.quota_exhausted) == ("RESOURCE_EXHAUSTED", False)


@pytest.mark.parametrize(("fault", "after"), [
    (Fault(status=429, message="Please retry in 40s.", headers={"Retry-After": "3"}), 3.0),  # the header wins
    (Fault(status=429, message="Please retry in 999999999s."), None),  # past a day: a broken hint, not advice
], ids=["header-wins", "absurd-delay"])
async def test_retry_info_yields_to_a_header_and_to_bounds(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient, fault: Fault,
        after: float | None) -> None:
    gemini_fake.script(fault)
    with pytest.raises(RateLimitError) as caught:
        await ADAPTER.chat(client, gemini, asking("hi"))
    assert caught.value.retry_after_s == after


async def test_a_retry_delay_arrives_on_a_stream_s_error_status(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    gemini_fake.script(Fault(status=503, message="The model is overloaded. Please retry in 2s."))
    with pytest.raises(ProviderUnavailableError) as caught:
        await anext(ADAPTER.stream_chat(client, gemini, asking("hi")))
    assert caught.value.retry_after_s == 2.0


async def test_a_spent_per_day_quota_is_quota_exhausted(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    gemini_fake.script(Fault(status=429, code="insufficient_quota"))
    with pytest.raises(RateLimitError) as caught:
        await ADAPTER.chat(client, gemini, asking("hi"))
    assert caught.value.quota_exhausted


async def test_a_too_long_prompt_is_a_context_length_error(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    gemini_fake.script(Fault(status=400, code="context_length_exceeded"))
    with pytest.raises(ContextLengthExceededError, match="input token count"):
        await ADAPTER.chat(client, gemini, asking("hi"))


async def test_an_error_event_in_a_stream_maps_by_its_status(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    gemini_fake.script(Fault(stream_error_after=1, code="RESOURCE_EXHAUSTED", message="slow down"))
    with pytest.raises(RateLimitError, match="slow down"):
        await drain(ADAPTER.stream_chat(client, gemini, asking("hello world")))
