"""Placeholders: stable within a call, never mistaken for the caller's own text, restored exactly."""

from __future__ import annotations

import json

from provmw_guard import EntityAnalyzer, Redaction
from provmw_guard.placeholders import reserved_names

FIND = EntityAnalyzer().analyze


def redacted(redaction: Redaction, text: str) -> str:
    return redaction.redact(text, FIND(text))


def test_the_same_value_gets_the_same_placeholder() -> None:
    redaction = Redaction()
    assert redacted(redaction, "ada@example.com, bob@example.com") == "<EMAIL_1>, <EMAIL_2>"
    assert redacted(redaction, "again ada@example.com") == "again <EMAIL_1>"


def test_a_placeholder_the_caller_wrote_is_not_handed_out_nor_restored() -> None:
    text = "the template says <EMAIL_1>; mail ada@example.com"
    redaction = Redaction(reserved_names([text]))
    sent = redacted(redaction, text)
    assert sent == "the template says <EMAIL_1>; mail <EMAIL_2>"
    assert redaction.restore(sent) == text


def test_a_placeholder_this_call_did_not_issue_is_left_as_written() -> None:
    redaction = Redaction()
    redacted(redaction, "ada@example.com")
    assert redaction.restore("<EMAIL_1> and <EMAIL_9> and <PHONE_1>") == "ada@example.com and <EMAIL_9> and <PHONE_1>"


def test_json_restoring_escapes_the_value() -> None:
    redaction = Redaction()
    redaction.placeholder('say "hi"\\', "QUOTE")
    restored = redaction.restore_json('{"text": "<QUOTE_1>"}')
    assert json.loads(restored) == {"text": 'say "hi"\\'}


def test_json_restoring_reads_escaped_brackets() -> None:
    redaction = Redaction()
    redacted(redaction, "ada@example.com")
    assert redaction.restore_json('{"to": "\\u003cEMAIL_1\\u003e"}') == '{"to": "ada@example.com"}'


def test_redacted_json_stays_json_where_strings_hold_escapes() -> None:
    redaction = Redaction()
    arguments = json.dumps({"note": "line\nada@example.com \u00e9"}, ensure_ascii=True)
    assert json.loads(redaction.redact_json(arguments, FIND)) == {"note": "line\n<EMAIL_1> \u00e9"}


def test_a_number_holding_a_value_becomes_a_string() -> None:
    redaction = Redaction()
    assert json.loads(redaction.redact_json('{"card": 4111111111111111}', FIND)) == {"card": "<CARD_1>"}


def test_arguments_that_are_not_json_are_redacted_as_text() -> None:
    redaction = Redaction()
    assert redaction.redact_json("to ada@example.com", FIND) == "to <EMAIL_1>"


def test_parsed_values_are_restored_in_keys_and_strings() -> None:
    redaction = Redaction()
    redacted(redaction, "ada@example.com")
    assert redaction.restore_value({"<EMAIL_1>": ["<EMAIL_1>", 3]}) == {"ada@example.com": ["ada@example.com", 3]}


def test_counts_are_kept_per_kind() -> None:
    redaction = Redaction()
    redacted(redaction, "ada@example.com, ada@example.com, 10.0.0.1")
    assert dict(redaction.counts) == {"EMAIL": 2, "IP": 1}
