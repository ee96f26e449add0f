"""The built-in ``cohere`` adapter: Cohere's /v2/rerank against the fake provider, Jina's and Voyage's
/v1/rerank through base_url, its error table, and every malformed answer refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from provmw.config import ProviderConfig
from provmw.errors import (
    AuthenticationError,
    InvalidRequestError,
    MalformedResponseError,
    ProviderError,
    ProviderUnavailableError,
    RateLimitError,
    UnsupportedOperationError,
)
from provmw.http import HttpClient
from provmw.messages import Message
from provmw.operations.rerank import RerankRequest
from provmw.providers import capabilities_of
from provmw.providers.cohere import CohereAdapter, _body
from provmw.requests import ChatRequest
from provmw.testing import AdapterConformance, FakeProvider, Fault
from tests.conftest import SENTINEL_KEY
from tests.hostile import HostileProvider

ADAPTER = CohereAdapter()
FRUIT = RerankRequest(query="red apple", documents=["green pear", "a red apple", "apple pie"], top_n=2)


def cohere(base_url: str, **fields: Any) -> ProviderConfig:
    return ProviderConfig(identifier="co", provider="cohere", model="rerank-v3.5", base_url=base_url,
                          api_key=SENTINEL_KEY, **fields)


async def test_the_documents_come_back_best_first_with_their_scores(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.rerank(http, cohere(fake.url), FRUIT)
    assert [(r.index, r.relevance_score) for r in response.results] == [(1, 1.0), (2, 0.5)]
    assert (response.provider, response.model, response.served_by, response.response_id) == (
        "cohere", "rerank-v3.5", "co", "rerank-fake")


async def test_cohere_search_units_are_the_usage(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.rerank(http, cohere(fake.url), RerankRequest(query="q", documents=["d"] * 101))
    assert dict(response.usage.units) == {"search_unit": 2.0}
    assert response.usage.input_tokens == 0


async def test_the_body_is_model_query_documents_top_n_and_extra_body_with_a_bearer_key(
        fake: FakeProvider, http: HttpClient) -> None:
    options = {"extra_body": {"max_tokens_per_doc": 512}, "temperature": 0}
    await ADAPTER.rerank(http, cohere(fake.url, options=options), FRUIT)
    sent = fake.received[-1]
    assert sent.route == "rerank" and sent.headers["Authorization"] == f"Bearer {SENTINEL_KEY}"
    assert sent.body == {"model": "rerank-v3.5", "query": "red apple", "documents": list(FRUIT.documents),
                         "top_n": 2, "max_tokens_per_doc": 512}


async def test_no_top_n_asks_for_every_document(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.rerank(http, cohere(fake.url), RerankRequest(query="q", documents=["a", "b", "c"]))
    assert "top_n" not in fake.received[-1].body and len(response.results) == 3


async def test_a_base_url_ending_in_its_version_gets_rerank_added_and_tokens_are_input(
        hostile: HostileProvider, http: HttpClient) -> None:
    hostile.answer(json.dumps({"model": "jina-reranker-v2-base-multilingual", "usage": {"total_tokens": 42},
                               "results": [{"index": 1, "document": {"text": "a red apple"}, "relevance_score": 0.9},
                                           {"index": 0, "relevance_score": 0.1}]}))
    response = await ADAPTER.rerank(http, cohere(f"{hostile.url}/v1"), FRUIT)
    assert hostile.requests[-1].path == "/v1/rerank"
    assert response.usage.input_tokens == 42 and not response.usage.units and response.indexes == (1, 0)


async def test_voyage_answers_under_data(hostile: HostileProvider, http: HttpClient) -> None:
    hostile.answer(json.dumps({"object": "list", "model": "rerank-2", "usage": {"total_tokens": 7},
                               "data": [{"relevance_score": 0.4, "index": 2}, {"relevance_score": 0.8, "index": 0}]}))
    response = await ADAPTER.rerank(http, cohere(f"{hostile.url}/v1"), FRUIT)
    assert response.indexes == (0, 2) and response.model == "rerank-2"


def test_voyage_is_asked_for_top_k_and_the_others_for_top_n() -> None:
    assert _body(cohere("https://api.voyageai.com/v1"), FRUIT)["top_k"] == 2
    assert _body(cohere("https://api.jina.ai/v1"), FRUIT)["top_n"] == 2


@pytest.mark.parametrize(("status", "error"), [(400, InvalidRequestError), (401, AuthenticationError),
                                               (429, RateLimitError), (500, ProviderUnavailableError)])
async def test_error_statuses_map_to_the_error_tree_with_coheres_message(
        fake: FakeProvider, http: HttpClient, status: int, error: type[ProviderError]) -> None:
    fake.script(Fault(status=status, message="documents: too many"), route="rerank")
    with pytest.raises(error, match="documents: too many") as raised:
        await ADAPTER.rerank(http, cohere(fake.url), FRUIT)
    assert raised.value.status == status and raised.value.provider == "cohere"


async def test_a_jina_detail_is_the_message(hostile: HostileProvider, http: HttpClient) -> None:
    hostile.answer(json.dumps({"detail": "Invalid API key"}), status=401)
    with pytest.raises(AuthenticationError, match="Invalid API key"):
        await ADAPTER.rerank(http, cohere(f"{hostile.url}/v1"), FRUIT)


@pytest.mark.parametrize(("results", "named"), [
    ([{"index": 3, "relevance_score": 0.5}], "index of 3 for 3 documents"),
    ([{"index": 1, "relevance_score": 0.5}, {"index": 1, "relevance_score": 0.4}], "more than once"),
    ([{"index": 1, "relevance_score": "0.5"}], "relevance_score"),
    ([{"index": 1, "relevance_score": None}], "relevance_score"),
    ([{"index": -1, "relevance_score": 0.5}], "index"),
    ([{"index": "1", "relevance_score": 0.5}], "index"),
    ([{"index": i, "relevance_score": 0.5} for i in range(3)], "3 results for 2 asked"),
    ("none", "results"),
])
async def test_a_malformed_ranking_is_refused(hostile: HostileProvider, http: HttpClient, results: Any,
                                              named: str) -> None:
    hostile.answer(json.dumps({"id": "r", "results": results, "meta": {"billed_units": {"search_units": 1}}}))
    with pytest.raises(MalformedResponseError, match=named):
        await ADAPTER.rerank(http, cohere(hostile.url), FRUIT)


@pytest.mark.parametrize("units", [-1, 1.5, "1", True, 2, 2**41])  # FRUIT is 1 search unit at worst
async def test_search_units_out_of_bounds_are_malformed_never_credits(fake: FakeProvider, http: HttpClient,
                                                                      units: Any) -> None:
    fake.script(Fault(usage={"search_units": units}), route="rerank")
    with pytest.raises(MalformedResponseError, match="search_units"):
        await ADAPTER.rerank(http, cohere(fake.url), FRUIT)


async def test_more_tokens_than_the_query_once_per_document_and_the_documents_is_malformed(
        hostile: HostileProvider, http: HttpClient) -> None:
    most = FRUIT.input_bytes()
    hostile.answer(json.dumps({"usage": {"total_tokens": most + 1}, "results": [{"index": 0, "relevance_score": 1}]}))
    with pytest.raises(MalformedResponseError, match=f"above the call's bound of {most}"):
        await ADAPTER.rerank(http, cohere(f"{hostile.url}/v1"), FRUIT)


async def test_a_negative_token_count_is_malformed(hostile: HostileProvider, http: HttpClient) -> None:
    hostile.answer(json.dumps({"usage": {"total_tokens": -5}, "results": [{"index": 0, "relevance_score": 0.1}]}))
    with pytest.raises(MalformedResponseError, match="total_tokens"):
        await ADAPTER.rerank(http, cohere(f"{hostile.url}/v1"), FRUIT)


def test_it_offers_rerank_and_nothing_else() -> None:
    offered = capabilities_of(ADAPTER)
    assert offered.rerank and offered.lacking({"chat", "completion", "embeddings", "streaming", "tools", "vision"}) \
        == ("chat", "completion", "embeddings", "streaming", "tools", "vision")
    assert (ADAPTER.api_key_env, ADAPTER.default_base_url) == ("CO_API_KEY", "https://api.cohere.com")


async def test_chat_is_refused_before_any_request(fake: FakeProvider, http: HttpClient) -> None:
    with pytest.raises(UnsupportedOperationError, match="'chat'"):
        await ADAPTER.chat(http, cohere(fake.url), ChatRequest(messages=[Message.user("hi")]))
    assert fake.count() == 0


async def test_a_body_that_is_not_json_is_malformed(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(malformed_json=True), route="rerank")
    with pytest.raises(MalformedResponseError):
        await ADAPTER.rerank(http, cohere(fake.url), FRUIT)


async def test_extra_body_cannot_replace_what_the_call_was_priced_on(fake: FakeProvider, http: HttpClient) -> None:
    extra = {"documents": ["x"] * 500, "query": "other", "top_n": 500}  # a configuration refuses "model" itself
    await ADAPTER.rerank(http, cohere(fake.url, options={"extra_body": extra}), FRUIT)
    sent = fake.received[-1].body
    assert (sent["model"], sent["query"], sent["documents"], sent["top_n"]) == (
        "rerank-v3.5", "red apple", list(FRUIT.documents), 2)


class TestCohereConformance(AdapterConformance):
    """Rerank only: the chat cases stand aside (no usage_with_cache), the operations' cases run."""

    adapter = CohereAdapter()

    def config(self, fake: FakeProvider, **fields: Any) -> ProviderConfig:
        return ProviderConfig(identifier="co", provider="cohere", model="rerank-v3.5", base_url=fake.url, **fields)
