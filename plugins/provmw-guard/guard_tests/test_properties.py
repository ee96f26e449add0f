"""Properties over a generated corpus of every kind, embedded in prose, JSON and tool-call arguments:
no raw value survives redaction, restoring gives back exactly what was redacted, and a stream cut
anywhere restores exactly."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st
from provmw_guard import EntityAnalyzer, Finding, Redaction, SecretScanner, StreamRestorer
from provmw_guard.detect import merged
from provmw_guard.iban import IBAN_LENGTHS, mod97

from provmw.responses import ChatChunk

ENTITIES, SECRETS = EntityAnalyzer(), SecretScanner()
DIGITS, UPPER, ALNUM = "0123456789", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz0123456789"


def find(text: str) -> list[Finding]:
    found = [*ENTITIES.analyze(text), *(Finding(f.start, f.end, "SECRET") for f in SECRETS.find(text))]
    return merged(found, len(text))


def digits(low: int, high: int) -> st.SearchStrategy[str]:
    return st.text(DIGITS, min_size=low, max_size=high)


@st.composite
def emails(draw: st.DrawFn) -> str:
    local = draw(st.text(ALNUM, min_size=1, max_size=8)) + draw(st.sampled_from(["", ".x", "+tag", "_y", "-z"]))
    labels = draw(st.lists(st.text(ALNUM, min_size=1, max_size=8), min_size=1, max_size=3))
    return f"{local}@{'.'.join(labels)}.{draw(st.text('abcdefghij', min_size=2, max_size=6))}"


@st.composite
def phones(draw: st.DrawFn) -> str:
    groups = draw(st.lists(digits(2, 4), min_size=3, max_size=4))
    return f"+{draw(digits(1, 2))} " + draw(st.sampled_from([" ", "-"])).join(groups)


@st.composite
def cards(draw: st.DrawFn) -> str:
    body = draw(st.sampled_from("45")) + draw(digits(14, 14))
    check = next(d for d in DIGITS if _luhn(body + d))
    number = body + check
    separator = draw(st.sampled_from(["", " ", "-"]))
    return separator.join(number[i:i + 4] for i in range(0, 16, 4))


def _luhn(number: str) -> bool:
    total = sum(int(c) if i % 2 == 0 else (2 * int(c) - 9 if int(c) > 4 else 2 * int(c))
                for i, c in enumerate(reversed(number)))
    return total % 10 == 0


@st.composite
def ibans(draw: st.DrawFn) -> str:
    country = draw(st.sampled_from(sorted(IBAN_LENGTHS)))
    bban = draw(st.text(DIGITS + UPPER, min_size=IBAN_LENGTHS[country] - 4, max_size=IBAN_LENGTHS[country] - 4))
    check = next(f"{n:02d}" for n in range(2, 99) if mod97(f"{country}{n:02d}{bban}"))
    compact = f"{country}{check}{bban}"
    return draw(st.sampled_from([compact, " ".join(compact[i:i + 4] for i in range(0, len(compact), 4))]))


@st.composite
def secrets(draw: st.DrawFn) -> str:
    random = draw(st.text(ALNUM + "ABCDEFGH", min_size=40, max_size=40)) + draw(digits(1, 1))
    return draw(st.sampled_from([f"sk-ant-api03-{random}", f"sk-proj-{random}", f"AKIA{random.upper()[:16]}",
                                 f"ghp_{random[:36]}", f"xoxb-{random}"]))


VALUES = st.one_of(emails(), phones(), cards(), ibans(), secrets(), st.ip_addresses(v=4).map(str),
                   st.ip_addresses(v=6).map(str))
WORDS = st.lists(st.sampled_from(["the", "order", "for", "Ada", "is", "ready", "see", "note", "mail"]), max_size=4)
AROUND = st.sampled_from([(" ", " "), ("(", ")"), (" ", ". "), ('"', '"'), (" ", ", "), ("\n", "\n")])


@st.composite
def prose(draw: st.DrawFn) -> tuple[str, list[str]]:
    values, pieces = draw(st.lists(VALUES, min_size=1, max_size=4)), []
    for value in values:
        before, after = draw(AROUND)
        pieces += [" ".join(draw(WORDS)), before, value, after]
    return "".join(pieces), values


@given(prose())
@settings(max_examples=300, deadline=None)
def test_no_raw_value_survives_redaction_in_prose(case: tuple[str, list[str]]) -> None:
    text, values = case
    redacted = Redaction().redact(text, find(text))
    assert [v for v in values if v in redacted] == []


@given(prose())
@settings(max_examples=300, deadline=None)
def test_restoring_gives_back_exactly_what_was_redacted(case: tuple[str, list[str]]) -> None:
    text, _ = case
    redaction = Redaction()
    assert redaction.restore(redaction.redact(text, find(text))) == text


@given(st.dictionaries(st.sampled_from(["to", "card", "from", "note"]), VALUES, min_size=1))
@settings(max_examples=200, deadline=None)
def test_tool_call_arguments_stay_json_and_come_back_whole(arguments: dict[str, str]) -> None:
    text = json.dumps(arguments)
    redaction = Redaction()
    redacted = redaction.redact_json(text, find)
    assert [v for v in arguments.values() if v in redacted] == []
    assert json.loads(redaction.restore_json(redacted)) == arguments


@given(prose(), st.lists(st.integers(min_value=0), max_size=12))
@settings(max_examples=300, deadline=None)
def test_a_stream_cut_anywhere_restores_exactly(case: tuple[str, list[str]], cuts: list[int]) -> None:
    text, _ = case
    redaction = Redaction()
    answer = "echo: " + redaction.redact(text, find(text))
    points = sorted({0, len(answer), *(c % (len(answer) + 1) for c in cuts)})
    restorer = StreamRestorer(redaction)
    out = [c for a, b in itertools.pairwise(points) for c in restorer.chunk(ChatChunk(text=answer[a:b]))]
    out += [*restorer.chunk(ChatChunk(finish_reason="stop")), *restorer.end()]
    assert "".join(c.text for c in out) == "echo: " + text


def test_every_single_cut_of_an_answer_restores_exactly() -> None:
    redaction = Redaction()
    text = "mail ada@example.com, call +44 20 7946 0958, pay GB82 WEST 1234 5698 7654 32"
    answer = redaction.redact(text, find(text))
    for cut in range(len(answer) + 1):
        restorer = StreamRestorer(redaction)
        out = [*restorer.chunk(ChatChunk(text=answer[:cut])), *restorer.chunk(ChatChunk(text=answer[cut:])),
               *restorer.end()]
        assert "".join(c.text for c in out) == text, cut
