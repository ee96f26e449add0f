"""Azure's answers carry OpenAI's ``x-ratelimit-*`` headers: read into ``rate_limit`` as OpenAI's,
for answers, embeddings and a stream's first chunk."""

from __future__ import annotations

from provmw_azure import AzureOpenAIAdapter

from azure_tests.azure_helpers import azure_config
from provmw.http import HttpClient
from provmw.messages import Message
from provmw.requests import ChatRequest, EmbeddingRequest
from provmw.responses import RateLimitHint
from provmw.testing import FakeClock, FakeProvider

CHAT = ChatRequest(messages=(Message(role="user", content="hi"),))


async def test_an_azure_answer_under_a_limit_says_what_is_left(fake: FakeProvider, http: HttpClient) -> None:
    fake.limit(1, model="gpt-4o-prod", clock=FakeClock(0.0))
    response = await AzureOpenAIAdapter().chat(http, azure_config(fake), CHAT)
    assert response.rate_limit == RateLimitHint(remaining_requests=0, requests_reset_s=60.0)


async def test_an_azure_embedding_carries_the_hint(fake: FakeProvider, http: HttpClient) -> None:
    fake.limit(4, model="emb", clock=FakeClock(0.0))
    response = await AzureOpenAIAdapter().embed(http, azure_config(fake, model="emb"), EmbeddingRequest(inputs=("x",)))
    assert response.rate_limit == RateLimitHint(remaining_requests=3, requests_reset_s=0.0)


async def test_an_azure_stream_puts_the_hint_on_its_first_chunk(fake: FakeProvider, http: HttpClient) -> None:
    fake.limit(2, model="gpt-4o-prod", clock=FakeClock(0.0))
    chunks = [c async for c in AzureOpenAIAdapter().stream_chat(http, azure_config(fake), CHAT)]
    assert [c.rate_limit for c in chunks] == [RateLimitHint(remaining_requests=1, requests_reset_s=0.0)] + \
        [None] * (len(chunks) - 1)
