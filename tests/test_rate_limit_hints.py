"""``RateLimitHint`` on responses and chunks: ``to_dict``/``from_dict`` round-trip it exactly (the
cache stores dicts), and a stored hint is bounded as a provider's is."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.errors import InvalidDataError
from provmw.responses import (
    MAX_RATE_LIMIT_COUNT,
    MAX_RATE_LIMIT_RESET_S,
    ChatChunk,
    CompletionResponse,
    EmbeddingResponse,
    RateLimitHint,
    response_from_dict,
)

counts = st.none() | st.integers(0, MAX_RATE_LIMIT_COUNT)
resets = st.none() | st.floats(0, MAX_RATE_LIMIT_RESET_S)
hints = st.builds(RateLimitHint, remaining_requests=counts, remaining_tokens=counts, requests_reset_s=resets,
                  tokens_reset_s=resets)


@given(hints)
def test_a_completion_with_a_hint_round_trips_through_json(hint: RateLimitHint) -> None:
    response = CompletionResponse(provider="p", model="m", text="hi", rate_limit=hint)
    assert response_from_dict(json.loads(json.dumps(response.to_dict()))) == response


@given(hints)
def test_a_chunk_with_a_hint_round_trips_through_json(hint: RateLimitHint) -> None:
    chunk = ChatChunk(text="a", rate_limit=hint)
    assert ChatChunk.from_dict(json.loads(json.dumps(chunk.to_dict()))) == chunk


def test_a_stored_answer_from_before_hints_reads_as_none() -> None:
    data = EmbeddingResponse(provider="p", model="m", vectors=[[1.0]]).to_dict()
    del data["rate_limit"]
    assert EmbeddingResponse.from_dict(data).rate_limit is None


@pytest.mark.parametrize("hint", [{"remaining_requests": -1}, {"remaining_tokens": MAX_RATE_LIMIT_COUNT + 1},
                                  {"requests_reset_s": -0.5}, {"tokens_reset_s": 1e300},
                                  {"remaining_requests": True}, {"requests_reset_s": "soon"}])
def test_a_stored_hint_out_of_bounds_is_refused(hint: dict[str, object]) -> None:
    data = CompletionResponse(provider="p", model="m").to_dict()
    with pytest.raises(InvalidDataError, match="rate_limit"):
        CompletionResponse.from_dict({**data, "rate_limit": hint})
