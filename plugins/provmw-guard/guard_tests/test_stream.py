"""The streaming restorer: a placeholder cut across chunks is restored; it holds back only what can
still become one, and releases it with the last chunk or at the end."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from provmw_guard import Redaction, StreamRestorer
from provmw_guard.placeholders import MAX_PLACEHOLDER_CHARS

from provmw.errors import GuardRefusedError
from provmw.messages import ToolCall
from provmw.responses import ChatChunk


def restorer(**kwargs: object) -> StreamRestorer:
    redaction = Redaction()
    redaction.placeholder("ada@example.com", "EMAIL")
    return StreamRestorer(redaction, **kwargs)  # type: ignore[arg-type]


def run(filter_: StreamRestorer, pieces: Sequence[str], *, finish: bool = True) -> list[ChatChunk]:
    out = [c for piece in pieces for c in filter_.chunk(ChatChunk(text=piece))]
    if finish:
        out += filter_.chunk(ChatChunk(finish_reason="stop"))
    return out + list(filter_.end())


def test_a_placeholder_cut_in_two_is_restored() -> None:
    chunks = run(restorer(), ["mail <EMA", "IL_1> now"])
    assert [c.text for c in chunks] == ["mail ", "ada@example.com now", ""]


def test_a_chunk_without_a_bracket_passes_as_it_came() -> None:
    chunk = ChatChunk(text="plain words")
    assert restorer().chunk(chunk)[0] is chunk


def test_what_is_held_comes_with_the_last_chunk() -> None:
    filter_ = restorer()
    assert filter_.chunk(ChatChunk(text="<EMAIL_")) == ()
    (last,) = filter_.chunk(ChatChunk(text="1>", finish_reason="stop"))
    assert (last.text, last.finish_reason) == ("ada@example.com", "stop")


def test_what_is_held_when_the_stream_is_cut_comes_at_the_end() -> None:
    chunks = run(restorer(), ["so <EMAIL"], finish=False)
    assert "".join(c.text for c in chunks) == "so <EMAIL"


def test_an_unclosed_bracket_is_held_no_longer_than_a_placeholder() -> None:
    filter_ = restorer()
    filter_.chunk(ChatChunk(text="<"))
    (out,) = filter_.chunk(ChatChunk(text="A" * MAX_PLACEHOLDER_CHARS))
    assert out.text == "<" + "A" * MAX_PLACEHOLDER_CHARS


def test_a_less_than_sign_in_prose_is_not_held() -> None:
    assert [c.text for c in restorer().chunk(ChatChunk(text="a < b"))] == ["a < b"]


def test_json_answers_are_restored_escaped_and_cut_inside_an_escape() -> None:
    chunks = run(restorer(json=True), ['{"to": "\\u003cEMAIL_1\\u00', '3e"}'])
    assert "".join(c.text for c in chunks) == '{"to": "ada@example.com"}'


def test_tool_calls_in_a_chunk_are_restored() -> None:
    call = ToolCall("c1", "send", '{"to": "<EMAIL_1>"}')
    (out,) = restorer().chunk(ChatChunk(tool_calls=(call,)))
    assert out.tool_calls[0].arguments == '{"to": "ada@example.com"}'


def test_a_watch_that_raises_ends_the_stream() -> None:
    def watch(text: str) -> None:
        if "ada@" in text:
            raise GuardRefusedError("refused", rule="deny:mail", stage="output")

    filter_ = restorer(watch=watch)
    with pytest.raises(GuardRefusedError):
        run(filter_, ["to <EMAIL_1>"])
