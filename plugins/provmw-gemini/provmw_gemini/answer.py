"""Reading a ``GenerateContentResponse`` (a whole answer, or one event of a stream).

Every field is type-checked: a wrong type is an ``InvalidDataError`` the adapter turns into
a ``MalformedResponseError``. A prompt Gemini blocked (``promptFeedback.blockReason``) or an
answer it stopped for safety, recitation or a blocklist is a ``ContentPolicyError``.

Gemini's function calls carry no id (only some APIs fill ``functionCall.id``): a call without
one gets ``call_`` and 24 hex digits of the SHA-256 of the answer's ``responseId``, the call's
place among the answer's calls, its name and its arguments. The same answer read twice (or
streamed) gives the same ids; the id is short and plain enough for any provider of a
fallback chain to take back in a conversation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import attrs

from provmw import wire
from provmw.errors import ContentPolicyError
from provmw.messages import ToolCall
from provmw.responses import Usage
from provmw.wire import UsageBody

__all__ = ["BLOCKING_FINISH_REASONS", "Answer", "call_id", "finish_reason", "read_answer", "tool_calls", "usage"]

# Finish reasons after which Gemini withheld (part of) the answer for what it says.
BLOCKING_FINISH_REASONS = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII",
                                     "IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION"})
_FINISH_REASONS = {"STOP": "stop", "MAX_TOKENS": "length"}


@attrs.frozen
class Answer:
    """What one response (or stream event) holds: text, calls as ``(id or None, name, args)``."""

    text: str
    calls: tuple[tuple[str | None, str, str], ...]
    finish: str | None
    usage: Any
    response_id: str
    model: str | None


def call_id(response_id: str, index: int, name: str, arguments: str) -> str:
    """The stable id of an answer's ``index``-th function call."""
    key = json.dumps([response_id, index, name, arguments], separators=(",", ":"))
    return "call_" + hashlib.sha256(key.encode()).hexdigest()[:24]


def tool_calls(answer: Answer, first_index: int = 0) -> tuple[ToolCall, ...]:
    """The answer's calls, numbered from ``first_index`` (the calls a stream gave before)."""
    return tuple(ToolCall(id=given or call_id(answer.response_id, first_index + i, name, args), name=name,
                          arguments=args) for i, (given, name, args) in enumerate(answer.calls))


def _blocked(reason: str, ratings: Any, model: str, what: str) -> ContentPolicyError:
    blocked = [r.get("category") for r in ratings or () if isinstance(r, Mapping) and r.get("blocked")]
    categories = f" ({', '.join(str(c) for c in blocked)})" if blocked else ""
    return ContentPolicyError(f"Gemini blocked the {what}: {reason}{categories}", provider="gemini", model=model,
                              code=reason)


def _check_prompt(body: Mapping[str, Any], model: str) -> None:
    feedback = wire.get(body, "promptFeedback", dict, "response", default=None) or {}
    reason = wire.get(feedback, "blockReason", str, "response.promptFeedback", default=None)
    if reason is not None and reason != "BLOCK_REASON_UNSPECIFIED":
        raise _blocked(reason, feedback.get("safetyRatings"), model, "prompt")


def _call(part: Mapping[str, Any], where: str) -> tuple[str | None, str, str]:
    call = wire.get(part, "functionCall", dict, where)
    args = wire.get(call, "args", dict, f"{where}.functionCall", default=None) or {}
    return (wire.get(call, "id", str, f"{where}.functionCall", default=None) or None,
            wire.get(call, "name", str, f"{where}.functionCall"), json.dumps(args))


def _content(candidate: Mapping[str, Any]) -> tuple[str, tuple[tuple[str | None, str, str], ...]]:
    """Text and calls of a candidate; thought summaries (``thought: true``) are not the answer."""
    content = wire.get(candidate, "content", dict, "candidate", default=None) or {}
    text: list[str] = []
    calls = []
    for i, value in enumerate(wire.get(content, "parts", list, "candidate.content", default=None) or ()):
        where = f"candidate.content.parts[{i}]"
        part = wire.mapping(value, where)
        if wire.get(part, "thought", bool, where, default=None):
            continue
        if "functionCall" in part:
            calls.append(_call(part, where))
        elif "text" in part:
            text.append(wire.get(part, "text", str, where))
    return "".join(text), tuple(calls)


def read_answer(data: Any, model: str) -> Answer:
    """The first candidate of ``data``; raises ``ContentPolicyError`` for a blocked prompt or answer."""
    body = wire.mapping(data, "response")
    _check_prompt(body, model)
    candidates = wire.get(body, "candidates", list, "response", default=None) or []
    candidate = wire.mapping(candidates[0], "response.candidates[0]") if candidates else {}
    finish = wire.get(candidate, "finishReason", str, "candidate", default=None)
    if finish in BLOCKING_FINISH_REASONS:
        raise _blocked(finish, candidate.get("safetyRatings"), model, "answer")
    text, calls = _content(candidate)
    return Answer(text=text, calls=calls, finish=finish, usage=body.get("usageMetadata"),
                  response_id=wire.get(body, "responseId", str, "response", default=None) or "",
                  model=wire.get(body, "modelVersion", str, "response", default=None))


def finish_reason(finish: str | None, called: bool) -> str | None:
    """Gemini's finish reason normalised: a turn that called functions ends in ``tool_calls``
    (Gemini says STOP); reasons provmw has no name for pass through in lower case."""
    if finish is None:
        return None
    if called and finish == "STOP":
        return "tool_calls"
    return _FINISH_REASONS.get(finish, finish.lower())


def usage(value: object, model: str) -> Usage:
    """``usageMetadata`` as ADR 0015 counts: input is the prompt (cached content included) plus
    the tool-use prompt; output is the candidates plus the thoughts, which are billed as output."""
    body = UsageBody.of(value, provider="gemini", model=model, where="usageMetadata")
    thoughts = body.count("thoughtsTokenCount")
    return body.usage(input_tokens=body.count("promptTokenCount") + body.count("toolUsePromptTokenCount"),
                      output_tokens=body.count("candidatesTokenCount") + thoughts,
                      cached_input_tokens=body.count("cachedContentTokenCount"), reasoning_tokens=thoughts)
