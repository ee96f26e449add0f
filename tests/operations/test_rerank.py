"""RerankRequest's validation and bounds, and RerankResponse's order and round trip."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.context import ProviderOperation
from provmw.errors import ConfigurationError, InvalidDataError
from provmw.operations import OPERATIONS, response_types
from provmw.operations.rerank import PAIR_TOKENS, RankedDocument, RerankRequest, RerankResponse
from provmw.responses import Usage
from provmw.testing.wire_rank import cohere_rerank
from provmw.testing.wires import words


def ranked(*pairs: tuple[int, float]) -> list[RankedDocument]:
    return [RankedDocument(index=i, relevance_score=s) for i, s in pairs]


@pytest.mark.parametrize(("fields", "named"), [
    ({"query": "", "documents": ["a"]}, "query"),
    ({"query": 3, "documents": ["a"]}, "query"),
    ({"query": "q", "documents": []}, "documents"),
    ({"query": "q", "documents": "a"}, "documents"),
    ({"query": "q", "documents": ["a", ""]}, r"documents\[1\]"),
    ({"query": "q", "documents": ["a", 2]}, r"documents\[1\]"),
    ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
    ({"query": "q", "documents": ["a"], "top_n": 2}, "top_n"),
    ({"query": "q", "documents": ["a"], "top_n": True}, "top_n"),
])
def test_a_wrong_field_is_a_configuration_error_naming_it(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        RerankRequest(**fields)


def test_the_request_needs_rerank_is_deterministic_and_bills_no_output() -> None:
    request = RerankRequest(query="q", documents=["a", "b"], top_n=1)
    assert request.needs(streaming=False) == frozenset({"rerank"})
    assert request.deterministic({}) and request.most_output_tokens({}) == 0
    assert not OPERATIONS[ProviderOperation.RERANK].generated


def test_input_bytes_count_the_query_once_per_document_and_every_document_in_utf8() -> None:
    # Voyage's rule: query tokens x documents + document tokens; each pair's separators on top.
    assert RerankRequest(query="é", documents=["ab", "日本"]).input_bytes() == 2 * (2 + PAIR_TOKENS) + 2 + 6


def test_a_hundred_short_documents_are_one_search_unit_and_a_hundred_and_one_two() -> None:
    assert RerankRequest(query="q", documents=["doc"] * 100).most_units({}) == {"search_unit": 1.0}
    assert RerankRequest(query="q", documents=["doc"] * 101).most_units({}) == {"search_unit": 2.0}


def test_a_long_document_counts_once_per_chunk_left_beside_the_query() -> None:
    # 400 bytes of query leave 100 a chunk: a 1,000-byte document is 10 chunks, 100 of them 1,000
    request = RerankRequest(query="q" * 400, documents=["d" * 1_000] * 100)
    assert request.most_units({}) == {"search_unit": 10.0}


def test_a_query_filling_a_chunk_counts_every_document_byte_as_a_chunk() -> None:
    assert RerankRequest(query="q" * 600, documents=["d" * 150]).most_units({}) == {"search_unit": 2.0}


def test_to_dict_holds_everything_that_changes_the_answer() -> None:
    request = RerankRequest(query="q", documents=("a", "b"), top_n=1, options={"max_tokens_per_doc": 512})
    assert request.to_dict() == {"query": "q", "documents": ["a", "b"], "top_n": 1,
                                 "options": {"max_tokens_per_doc": 512}}


def test_results_are_ordered_best_first_and_equal_scores_by_index() -> None:
    response = RerankResponse(provider="p", model="m", results=ranked((2, 0.1), (3, 0.9), (1, 0.5), (0, 0.5)))
    assert response.indexes == (3, 0, 1, 2)


def test_an_index_given_twice_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="more than once"):
        RerankResponse(provider="p", model="m", results=ranked((1, 0.2), (1, 0.3)))


@pytest.mark.parametrize("fields", [{"index": -1, "relevance_score": 0.5}, {"index": 0, "relevance_score": "high"},
                                    {"index": 0, "relevance_score": float("nan")}])
def test_a_ranked_document_needs_an_index_and_a_finite_score(fields: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        RankedDocument(**fields)


def test_the_response_round_trips_through_json() -> None:
    response = RerankResponse(provider="cohere", model="rerank-v3.5", response_id="r1", served_by="co",
                              usage=Usage(units={"search_unit": 1}, cost_usd=0.002),
                              results=ranked((1, 0.75), (0, 0.25)))
    assert RerankResponse.from_dict(json.loads(json.dumps(response.to_dict()))) == response
    assert response_types()["rerank"] is RerankResponse


def test_from_dict_names_a_score_that_is_not_a_number() -> None:
    data = RerankResponse(provider="p", model="m", results=ranked((0, 0.5))).to_dict()
    data["results"] = [{"index": 0, "relevance_score": "0.5"}]
    with pytest.raises(InvalidDataError, match=r"results\[0\].relevance_score"):
        RerankResponse.from_dict(data)


def test_texts_are_the_query_then_each_document_and_with_texts_replaces_them() -> None:
    request = RerankRequest(query="q", documents=["a", "b"], top_n=1)
    rewritten = request.with_texts([t.upper() for t in request.texts()])
    assert request.texts() == ("q", "a", "b")
    assert (rewritten.query, rewritten.documents, rewritten.top_n) == ("Q", ("A", "B"), 1)


def test_with_texts_of_another_count_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="expected 3 texts"):
        RerankRequest(query="q", documents=["a", "b"]).with_texts(["q", "a"])


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=30))
def test_any_results_are_best_first_and_ties_keep_document_order(scores: list[float]) -> None:
    response = RerankResponse(provider="p", model="m", results=ranked(*enumerate(scores)))
    keys = [(-r.relevance_score, r.index) for r in response.results]
    assert keys == sorted(keys) and sorted(response.indexes) == list(range(len(scores)))


@given(st.text(min_size=1, max_size=600), st.lists(st.text(min_size=1, max_size=2_000), min_size=1, max_size=250))
def test_the_worst_case_is_never_below_what_the_fake_bills(query: str, documents: list[str]) -> None:
    billed = cohere_rerank({"query": query, "documents": documents}, words)["meta"]["billed_units"]["search_units"]
    assert RerankRequest(query=query, documents=documents).most_units({})["search_unit"] >= billed
