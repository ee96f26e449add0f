"""What a caller may pass as response_schema, how an answer is judged, and the repair turn."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

from provmw.errors import ConfigurationError, StructuredOutputError
from provmw.messages import Message
from provmw.requests import ChatRequest
from provmw.responses import CompletionResponse, response_from_dict
from provmw.structured import parsed_answer, repaired, schema_of

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


class Forecast(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str
    days: int


def test_a_dict_schema_is_kept_as_given() -> None:
    assert dict(schema_of(SCHEMA) or {}) == SCHEMA


def test_a_pydantic_model_class_gives_its_json_schema() -> None:
    schema = schema_of(Forecast)
    assert schema is not None
    assert (schema["required"], schema["additionalProperties"]) == (["city", "days"], False)


@pytest.mark.parametrize(("value", "problem"), [
    ({"type": "array", "items": {}}, "JSON object at its root"),
    ({"type": "object", "properties": {"city": {"type": "strong"}}}, "not a valid JSON Schema"),
    ("an object please", "got str"),
    (Message, "got type"),
])
def test_what_is_no_object_schema_is_a_configuration_error(value: object, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        schema_of(value)


def test_an_answer_that_is_not_json_says_so() -> None:
    answer = CompletionResponse(provider="p", model="m", text="Paris")
    with pytest.raises(StructuredOutputError, match="not JSON") as caught:
        parsed_answer(answer, SCHEMA)
    assert (caught.value.provider, caught.value.model) == ("p", "m")


def test_the_parsed_answer_round_trips_through_to_dict() -> None:
    answer = parsed_answer(CompletionResponse(provider="p", model="m", text='{"city": "Oslo"}'), SCHEMA)
    assert response_from_dict(answer.to_dict()) == answer
    assert answer.parsed == {"city": "Oslo"}


def test_the_repair_turn_follows_the_conversation() -> None:
    request = ChatRequest((Message.user("Paris?"),), response_schema=SCHEMA)
    turns = repaired(request, '{"town": 1}', "'city' is a required property").messages
    assert [m.role for m in turns] == ["user", "assistant", "user"]
    assert turns[1].text == '{"town": 1}' and "'city' is a required property" in turns[2].text


def test_a_schema_and_the_response_format_option_exclude_each_other() -> None:
    with pytest.raises(ConfigurationError, match="not both"):
        ChatRequest((Message.user("x"),), options={"response_format": "json_object"}, response_schema=SCHEMA)
