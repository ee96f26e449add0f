"""The fake provider refuses what a real one refuses: an embedding call to a chat model it knows."""

from __future__ import annotations

import pytest

from provmw.errors import InvalidRequestError
from provmw.http import HttpClient
from provmw.providers.openai import OpenAIAdapter
from provmw.requests import EmbeddingRequest
from provmw.testing import FakeProvider
from tests.conftest import openai_config

ADAPTER = OpenAIAdapter()


async def test_an_embedding_call_to_a_chat_model_is_a_400_naming_the_model(fake: FakeProvider,
                                                                           http: HttpClient) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        await ADAPTER.embed(http, openai_config(fake, model="gpt-4o-mini"), EmbeddingRequest(("a",)))
    assert refused.value.status == 400 and "'gpt-4o-mini' is a chat model" in str(refused.value)


async def test_an_embedding_model_embeds(fake: FakeProvider, http: HttpClient) -> None:
    config = openai_config(fake, model="text-embedding-3-small")
    response = await ADAPTER.embed(http, config, EmbeddingRequest(("a", "b"), dimensions=3))
    assert [len(vector) for vector in response.vectors] == [3, 3]


async def test_a_model_name_the_fake_does_not_know_embeds_as_asked(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.embed(http, openai_config(fake, model="gpt-test"), EmbeddingRequest(("a",)))
    assert len(response.vectors) == 1
