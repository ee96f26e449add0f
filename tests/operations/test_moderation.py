"""ModerationRequest's validation and bounds, and ModerationResponse's round trip."""

from __future__ import annotations

import json
from typing import Any

import pytest

from provmw.context import ProviderOperation
from provmw.errors import ConfigurationError, InvalidDataError
from provmw.operations import OPERATIONS, response_types
from provmw.operations.moderation import ModerationRequest, ModerationResponse, ModerationResult


def verdict(flagged: bool, **categories: bool) -> ModerationResult:
    return ModerationResult(flagged=flagged, categories=categories,
                            scores={name: 0.9 if on else 0.01 for name, on in categories.items()})


def test_one_text_is_one_input() -> None:
    assert ModerationRequest(inputs="hello").inputs == ("hello",)


@pytest.mark.parametrize(("inputs", "named"), [([], "inputs"), (b"x", "inputs"), (["a", ""], r"inputs\[1\]"),
                                                (["a", None], r"inputs\[1\]"), (7, "inputs")])
def test_wrong_inputs_are_a_configuration_error_naming_them(inputs: Any, named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        ModerationRequest(inputs=inputs)


def test_moderation_is_free_deterministic_and_needs_its_capability() -> None:
    request = ModerationRequest(inputs=["a", "b"])
    assert request.needs(streaming=False) == frozenset({"moderation"})
    assert request.most_units({}) == {} and request.most_output_tokens({}) == 0
    assert request.deterministic({}) and not OPERATIONS[ProviderOperation.MODERATION].generated


def test_input_bytes_count_every_text_in_utf8() -> None:
    assert ModerationRequest(inputs=["ab", "日本"]).input_bytes() == 8


def test_to_dict_holds_the_inputs_and_options() -> None:
    assert ModerationRequest(inputs="x").to_dict() == {"inputs": ["x"], "options": {}}


def test_a_result_names_its_flagged_categories_in_order() -> None:
    result = verdict(True, hate=False, violence=True, harassment=True)
    assert result.flagged_categories == ("violence", "harassment")


@pytest.mark.parametrize("fields", [{"flagged": "yes"}, {"flagged": True, "categories": {"hate": 1}},
                                    {"flagged": True, "scores": {"hate": "high"}},
                                    {"flagged": True, "scores": {"hate": float("inf")}}])
def test_a_result_refuses_wrong_types(fields: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        ModerationResult(**fields)


def test_the_response_round_trips_through_json_in_input_order() -> None:
    response = ModerationResponse(provider="openai", model="omni-moderation-latest", served_by="mod",
                                  results=[verdict(False, hate=False), verdict(True, violence=True)])
    again = ModerationResponse.from_dict(json.loads(json.dumps(response.to_dict())))
    assert again == response and again.flagged and [r.flagged for r in again.results] == [False, True]
    assert response_types()["moderation"] is ModerationResponse


def test_from_dict_names_a_flag_that_is_not_a_bool() -> None:
    data = ModerationResponse(provider="p", model="m", results=[verdict(False)]).to_dict()
    data["results"] = [{"flagged": "no", "categories": {}, "scores": {}}]
    with pytest.raises(InvalidDataError, match=r"results\[0\]"):
        ModerationResponse.from_dict(data)


def test_texts_are_the_inputs_and_with_texts_replaces_them_in_order() -> None:
    request = ModerationRequest(inputs=["a", "b"])
    assert request.texts() == ("a", "b")
    assert request.with_texts(["x", "y"]).inputs == ("x", "y")
