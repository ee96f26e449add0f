from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.errors import InvalidDataError
from provmw.messages import ImagePart, Message, TextPart, ToolCall
from provmw.responses import (
    Attempt,
    CompletionResponse,
    EmbeddingResponse,
    ProviderResponse,
    Usage,
    VisionResponse,
    response_from_dict,
)

texts = st.text(max_size=40)
counts = st.integers(min_value=0, max_value=10**9)
floats = st.floats(allow_nan=False, allow_infinity=False, width=64)
usages = st.builds(Usage, input_tokens=counts, output_tokens=counts, cached_input_tokens=counts,
                   cost_usd=st.none() | st.floats(min_value=0, max_value=1e6, allow_nan=False))
attempts = st.builds(Attempt, config_id=texts, error_type=st.none() | texts,
                     status=st.none() | st.integers(100, 599))
tool_calls = st.builds(ToolCall, id=texts, name=texts, arguments=texts)
common: dict[str, Any] = {
    "provider": texts, "model": texts, "usage": usages, "served_by": texts, "cached": st.booleans(),
    "attempts": st.lists(attempts, max_size=3).map(tuple),
}
completions = st.builds(CompletionResponse, text=texts, finish_reason=st.none() | texts,
                        tool_calls=st.lists(tool_calls, max_size=3).map(tuple), **common)
visions = st.builds(VisionResponse, text=texts, finish_reason=st.none() | texts, **common)
embeddings = st.builds(EmbeddingResponse, vectors=st.lists(st.lists(floats, max_size=6), max_size=4), **common)
responses = completions | visions | embeddings


@given(responses)
def test_to_dict_from_dict_round_trips_exactly(response: ProviderResponse) -> None:
    assert type(response).from_dict(response.to_dict()) == response


@given(responses)
def test_round_trip_survives_json(response: ProviderResponse) -> None:
    assert response_from_dict(json.loads(json.dumps(response.to_dict()))) == response


def _valid() -> dict[str, Any]:
    return CompletionResponse(provider="p", model="m", text="hi").to_dict()


@pytest.mark.parametrize(
    ("mutate", "named"),
    [
        (lambda d: d.pop("text"), "missing field 'text'"),
        (lambda d: d.update(text=3), "completion.text"),
        (lambda d: d.update(usage="x"), "usage"),
        (lambda d: d["usage"].update(input_tokens="3"), "usage.input_tokens"),
        (lambda d: d.update(cached="yes"), "completion.cached"),
        (lambda d: d.update(type="poem"), "unknown type 'poem'"),
        (lambda d: d.update(tool_calls=[{"id": "1"}]), "tool_call"),
    ],
)
def test_malformed_dicts_are_rejected_naming_the_field(mutate: Any, named: str) -> None:
    data = _valid()
    mutate(data)
    with pytest.raises(InvalidDataError, match=named):
        response_from_dict(data)


def test_non_finite_vector_values_are_rejected() -> None:
    data = EmbeddingResponse(provider="p", model="m", vectors=[[1.0]]).to_dict()
    data["vectors"] = [[float("nan")]]
    with pytest.raises(InvalidDataError, match="finite"):
        EmbeddingResponse.from_dict(data)


def test_from_dict_refuses_another_type() -> None:
    with pytest.raises(InvalidDataError, match="expected type 'embedding'"):
        EmbeddingResponse.from_dict(_valid())


def test_total_tokens_is_input_plus_output() -> None:
    assert Usage(input_tokens=3, output_tokens=4).total_tokens == 7


@given(st.lists(st.sampled_from(["user", "assistant", "system"]), min_size=1, max_size=4), texts)
def test_messages_round_trip(roles: list[str], text: str) -> None:
    for role in roles:
        message = Message(role, (TextPart(text), ImagePart(data=b"\x89PNG", media_type="image/png")))  # type: ignore[arg-type]
        assert Message.from_dict(json.loads(json.dumps(message.to_dict()))) == message


def test_image_part_needs_exactly_one_source() -> None:
    from provmw.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="exactly one"):
        ImagePart()
    with pytest.raises(ConfigurationError, match="exactly one"):
        ImagePart(url="https://x/y.png", data=b"1")


def test_tool_call_with_bad_json_arguments_raises_typed_error() -> None:
    with pytest.raises(InvalidDataError, match="not JSON"):
        ToolCall(id="1", name="f", arguments="{oops").parsed_arguments()


def test_usage_repr_shows_a_summed_cost_without_float_noise() -> None:
    usage = Usage(input_tokens=3, cost_usd=0.00001 + 0.00002)  # 3.0000000000000004e-05
    assert "cost_usd=3e-05," in repr(usage) and repr(usage).startswith("Usage(input_tokens=3, ")
    assert usage.cost_usd != 0.00003  # the value keeps its digits; only the repr rounds
