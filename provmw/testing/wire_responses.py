"""``ResponsesWire``: OpenAI's Responses API (``POST /v1/responses``) for ``FakeProvider``.

It answers as the chat route does (``openai_chat``: the echo, a call of the first function
tool per line of the last message, ``schema_example`` for a ``json_schema`` text format), in
the Responses shape: output items, ``input_tokens``/``output_tokens`` usage, a ``resp_`` id
made from the answer (the same answer has the same id, so two clients can compare it), and the
stream's events from ``response.created`` to ``response.completed``. A call asking for
``reasoning`` gets a reasoning item first (with ``encrypted_content`` when it ``include``s it).
A ``previous_response_id`` this fake never issued to a stored answer is refused as OpenAI
refuses it: HTTP 400, code ``previous_response_not_found``.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import itertools
import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from provmw.testing.wires import CREATED, OpenAIWire, Tokenizer, openai_chat, sse

__all__ = ["WireRefusalError", "ResponsesWire"]

_ISSUED_KEPT = 10_000  # the ids of stored answers the fake remembers at most (oldest forgotten first)
_PIECE = re.compile(r"\S+\s*|\s+")


class WireRefusalError(Exception):
    """What a wire's ``answer`` raises to refuse a request: ``FakeProvider`` answers it as an error body."""

    def __init__(self, status: int, code: str | None, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class ResponsesWire(OpenAIWire):
    """The Responses API route ``responses`` at ``/v1/responses``, unary and streamed."""

    routes: Mapping[str, str] = {"responses": "/v1/responses"}

    def __init__(self) -> None:
        self._issued: collections.OrderedDict[str, None] = collections.OrderedDict()

    def answer(self, route: str, body: Mapping[str, Any], count: Tokenizer) -> dict[str, Any]:
        previous = body.get("previous_response_id")
        if previous is not None and previous not in self._issued:
            raise WireRefusalError(400, "previous_response_not_found", f"Previous response with id '{previous}' "
                                                                     "not found.")
        payload = response_of(openai_chat(chat_body(body), count), body)
        if body.get("store", True) is not False:  # the API stores answers unless told not to
            self._issued[payload["id"]] = None
            while len(self._issued) > _ISSUED_KEPT:
                self._issued.popitem(last=False)
        return payload

    def frames(self, route: str, body: Mapping[str, Any], payload: Mapping[str, Any]) -> list[bytes]:
        return list(response_stream(payload))

    def error_frame(self, route: str, code: str | None, message: str) -> bytes:
        event = {"type": "error", "code": code or "server_error", "message": message, "param": None,
                 "sequence_number": 0}
        return sse(json.dumps(event), "error")

    def malformed_frame(self, route: str) -> bytes:
        return sse('{"type": "response.output_text.delta", "delta": ', "response.output_text.delta")


def chat_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat completion a Responses body asks for, for ``openai_chat`` to answer."""
    messages: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str):
        messages.append({"role": "system", "content": body["instructions"]})
    given = body.get("input")
    for item in [{"role": "user", "content": given}] if isinstance(given, str) else given or []:
        messages += _chat_messages(item)
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    tools = [{"type": "function", "function": {"name": t.get("name"), "description": t.get("description", ""),
                                               "parameters": t.get("parameters") or {}}}
             for t in body.get("tools") or () if t.get("type") == "function"]
    if tools:
        chat.update(tools=tools, tool_choice=body.get("tool_choice", "auto"))
    text_format = (body.get("text") or {}).get("format") or {}
    if text_format.get("type") == "json_schema":
        chat["response_format"] = {"type": "json_schema", "json_schema": {"name": text_format.get("name"),
                                                                          "schema": text_format.get("schema")}}
    if isinstance(body.get("max_output_tokens"), int):
        chat["max_tokens"] = body["max_output_tokens"]
    return chat


def _chat_messages(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    kind = item.get("type", "message")
    if kind == "function_call":
        call = {"id": item.get("call_id"), "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")}}
        return [{"role": "assistant", "content": None, "tool_calls": [call]}]
    if kind == "function_call_output":
        return [{"role": "tool", "tool_call_id": item.get("call_id"), "content": item.get("output")}]
    if kind != "message":
        return []  # reasoning: nothing a chat model reads
    content = item.get("content")
    parts = content if isinstance(content, str) else [
        {"type": "text", "text": p.get("text", "")} if p.get("type") in ("input_text", "output_text")
        else {"type": "image_url", "image_url": {"url": p.get("image_url")}} for p in content or ()]
    return [{"role": "system" if item.get("role") == "developer" else item.get("role"), "content": parts}]


def response_of(chat: Mapping[str, Any], body: Mapping[str, Any]) -> dict[str, Any]:
    """The Responses answer an ``openai_chat`` answer to ``chat_body(body)`` stands for."""
    choice, usage = chat["choices"][0], chat["usage"]
    message = choice["message"]
    output: list[dict[str, Any]] = []
    if message.get("content"):
        output.append({"type": "message", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": message["content"], "annotations": []}]})
    output += [{"type": "function_call", "id": f"fc_{i}", "call_id": call["id"], "status": "completed",
                "name": call["function"]["name"], "arguments": call["function"]["arguments"]}
               for i, call in enumerate(message.get("tool_calls") or ())]
    reasoning = 1 if isinstance(body.get("reasoning"), Mapping) else 0
    if reasoning:
        output.insert(0, _reasoning(body))
    digest = hashlib.sha256(json.dumps([body.get("model"), output, usage], sort_keys=True).encode()).hexdigest()
    for item in output:
        item.setdefault("id", f"msg_{digest[:24]}")
    cut = choice["finish_reason"] == "length"
    return {"id": f"resp_{digest[:32]}", "object": "response", "created_at": CREATED,
            "status": "incomplete" if cut else "completed", "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
            "instructions": body.get("instructions"), "model": body.get("model"), "output": output,
            "parallel_tool_calls": True, "previous_response_id": body.get("previous_response_id"),
            "store": body.get("store", True), "text": body.get("text") or {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
            "usage": {"input_tokens": usage["prompt_tokens"], "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": usage["completion_tokens"] + reasoning,
                      "output_tokens_details": {"reasoning_tokens": reasoning},
                      "total_tokens": usage["total_tokens"] + reasoning}}


def _reasoning(body: Mapping[str, Any]) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "id": "rs_fake", "summary": [{"type": "summary_text",
                                                                              "text": "thought it over"}]}
    if "reasoning.encrypted_content" in (body.get("include") or ()):
        item["encrypted_content"] = base64.b64encode(b"fake reasoning").decode()
    return item


def response_stream(payload: Mapping[str, Any]) -> Iterator[bytes]:
    """The events that stream ``payload``, a ``response_of`` answer, as the Responses API sends them."""
    numbers = itertools.count()

    def event(kind: str, **fields: Any) -> bytes:
        return sse(json.dumps({"type": kind, "sequence_number": next(numbers), **fields}), kind)

    opened = {**payload, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    yield event("response.created", response=opened)
    yield event("response.in_progress", response=opened)
    for index, item in enumerate(payload["output"]):
        yield from _item_events(index, item, event)
    yield event("response.incomplete" if payload["status"] == "incomplete" else "response.completed",
                response=payload)


def _item_events(index: int, item: Mapping[str, Any], event: Callable[..., bytes]) -> Iterator[bytes]:
    where = {"output_index": index, "item_id": item["id"]}
    if item["type"] == "message":
        yield event("response.output_item.added", output_index=index, item={**item, "status": "in_progress",
                                                                             "content": []})
        text = item["content"][0]["text"]
        empty = {"type": "output_text", "text": "", "annotations": []}
        yield event("response.content_part.added", **where, content_index=0, part=empty)
        for piece in _PIECE.findall(text):
            yield event("response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[])
        yield event("response.output_text.done", **where, content_index=0, text=text, logprobs=[])
        yield event("response.content_part.done", **where, content_index=0, part=item["content"][0])
    elif item["type"] == "function_call":
        yield event("response.output_item.added", output_index=index, item={**item, "status": "in_progress",
                                                                             "arguments": ""})
        arguments = item["arguments"]
        for start in range(0, len(arguments), 7):
            yield event("response.function_call_arguments.delta", **where, delta=arguments[start:start + 7])
        yield event("response.function_call_arguments.done", **where, arguments=arguments)
    else:
        yield event("response.output_item.added", output_index=index, item=item)
    yield event("response.output_item.done", output_index=index, item=item)
