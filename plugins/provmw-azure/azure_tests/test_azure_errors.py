"""Azure's error bodies, rewritten in the shape the OpenAI adapter's error table reads."""

from __future__ import annotations

import json

from provmw_azure._wire import filtered_answer, filtered_categories, openai_error

from provmw.http import HttpStatusError


def rewritten(status: int, body: object, secrets: tuple[str, ...] = ()) -> dict[str, object]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    error = openai_error(HttpStatusError(status, raw, {"retry-after": "1"}, "https://x"), not_found_hint=" (hint)",
                         secrets=secrets)
    assert (error.status, error.url, dict(error.headers)) == (status, "", {"retry-after": "1"})
    return json.loads(error.body)["error"]  # type: ignore[no-any-return]


def test_a_gateway_body_without_an_error_object_keeps_its_message() -> None:
    body = {"statusCode": 401, "message": "Unauthorized. Access token is missing, invalid, or expired."}
    assert rewritten(401, body) == {"code": None, "message": body["message"]}


def test_a_numeric_code_is_left_to_the_status() -> None:
    assert rewritten(429, {"error": {"code": "429", "message": "slow down"}})["code"] is None


def test_a_policy_violation_without_a_code_is_a_content_filter() -> None:
    body = {"error": {"message": "filtered", "innererror": {"code": "ResponsibleAIPolicyViolation",
                                                            "content_filter_result": {"jailbreak": {
                                                                "filtered": True, "detected": True}}}}}
    assert rewritten(400, body) == {"code": "content_filter", "message": "filtered (filtered: jailbreak)"}


def test_a_body_that_is_not_json_keeps_its_first_characters() -> None:
    assert rewritten(502, b"<html>Bad gateway</html>")["message"] == "<html>Bad gateway</html>"


def test_a_404_gets_the_hint_and_secrets_are_masked() -> None:
    body = {"error": {"code": "DeploymentNotFound", "message": "no such deployment for tok-abcdef"}}
    assert rewritten(404, body, secrets=("tok-abcdef",))["message"] == "no such deployment for *** (hint)"


def test_custom_blocklists_are_named_by_list() -> None:
    results = {"custom_blocklists": [{"filtered": True, "id": "words"}, {"filtered": False, "id": "other"}],
               "hate": {"filtered": False, "severity": "safe"}}
    assert filtered_categories(results) == ["custom_blocklists (words)"]


def test_an_unfiltered_answer_is_let_through() -> None:
    answer = {"choices": [{"finish_reason": "stop", "content_filter_results": {}}]}
    assert filtered_answer(answer, provider="azure", model="m") is None


def test_an_image_prompt_s_inner_error_names_the_filtered_categories() -> None:
    body = {"error": {"code": "content_policy_violation", "message": "rejected", "inner_error": {
        "code": "ResponsibleAIPolicyViolation", "content_filter_results": {
            "violence": {"filtered": True, "severity": "medium"}}}}}
    assert rewritten(400, body) == {"code": "content_filter", "message": "rejected (filtered: violence (medium))"}
