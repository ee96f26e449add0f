"""Deterministic answers and error bodies in the OpenAI and Anthropic wire formats.

Used by ``provmw.testing.FakeProvider``; kept apart so the server reads as routing
and fault injection only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["Tokenizer", "anthropic_error", "anthropic_message", "anthropic_stream", "characters",
           "embedding_vector", "openai_chat", "openai_chat_stream", "openai_completion", "openai_embeddings",
           "openai_error", "words"]

Tokenizer = Callable[[str], int]

# Anthropic documents these types; 408, which it does not document, is told as a timeout too.
_ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                          403: "permission_error", 404: "not_found_error", 408: "timeout_error",
                          413: "request_too_large", 429: "rate_limit_error", 504: "timeout_error",
                          529: "overloaded_error"}


def words(text: str) -> int:
    """The fake tokenizer: one token per whitespace-separated word, at least one."""
    return max(1, len(text.split()))


def characters(text: str) -> int:
    """A tokenizer as dense as real ones are on CJK text: one token per character, at least one."""
    return max(1, len(text))


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(b.get("text", "") for b in content if isinstance(b, Mapping)
                        and b.get("type") == "text")
    return ""


def _images_in(messages: list[Any]) -> int:
    return sum(1 for m in messages if isinstance(m.get("content"), list)
               for b in m["content"] if b.get("type") in ("image_url", "image"))


def _answer(messages: list[Any]) -> str:
    last_user = next((_text_of(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    images = _images_in(messages)
    seen = f"I see {images} image{'s' if images != 1 else ''}. " if images else ""
    return f"{seen}echo: {last_user}".strip()


def _prompt_tokens(messages: list[Any], count: Tokenizer, system: str = "") -> int:
    text_tokens = sum(count(_text_of(m.get("content"))) for m in messages)
    return (count(system) if system else 0) + text_tokens + 85 * _images_in(messages)


def _wants_tool(body: Mapping[str, Any], messages: list[Any]) -> bool:
    if not body.get("tools") or body.get("tool_choice") in ("none", {"type": "none"}):
        return False
    last = messages[-1] if messages else {}
    is_result = last.get("role") == "tool" or (
        isinstance(last.get("content"), list)
        and any(b.get("type") == "tool_result" for b in last["content"]))
    return not is_result


def openai_chat(body: Mapping[str, Any], count: Tokenizer = words) -> dict[str, Any]:
    messages = list(body.get("messages", []))
    message: dict[str, Any] = {"role": "assistant", "content": _answer(messages)}
    finish = "stop"
    if _wants_tool(body, messages):
        tool = body["tools"][0]["function"]["name"]
        args = json.dumps({"query": _text_of(messages[-1].get("content"))})
        message = {"role": "assistant", "content": None,
                   "tool_calls": [{"id": "call_0", "type": "function",
                                   "function": {"name": tool, "arguments": args}}]}
        finish = "tool_calls"
    text = message["content"] or ""
    output = _cut(text, body.get("max_tokens"), count)
    if output != text:
        message["content"], finish = output, "length"
    prompt = _prompt_tokens(messages, count)
    completion = count(output) if output else 1
    return {"id": "chatcmpl-fake", "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}}


def _cut(text: str, max_tokens: Any, count: Tokenizer) -> str:
    if not isinstance(max_tokens, int) or count(text) <= max_tokens:
        return text
    cut = " ".join(text.split()[:max_tokens])
    return cut if count(cut) <= max_tokens else cut[:max_tokens]


def openai_chat_stream(full: Mapping[str, Any]) -> Iterator[str]:
    """The events that stream ``full``, an ``openai_chat`` answer."""
    text = full["choices"][0]["message"]["content"] or ""
    for word in text.split(" "):
        yield json.dumps({"choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]})
    yield json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": full["choices"][0]["finish_reason"]}]})
    yield json.dumps({"choices": [], "usage": full["usage"]})
    yield "[DONE]"


def openai_completion(body: Mapping[str, Any], count: Tokenizer = words) -> dict[str, Any]:
    prompt = str(body.get("prompt", ""))
    text = _cut(f"echo: {prompt}", body.get("max_tokens"), count)
    return {"id": "cmpl-fake", "object": "text_completion", "model": body.get("model"),
            "choices": [{"index": 0, "text": text, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": count(prompt), "completion_tokens": count(text),
                      "total_tokens": count(prompt) + count(text)}}


def embedding_vector(text: str, dimensions: int) -> list[float]:
    """A deterministic vector in [-1, 1) derived from the text's SHA-256."""
    digest = b""
    counter = 0
    while len(digest) < 2 * dimensions:
        digest += hashlib.sha256(f"{counter}:{text}".encode()).digest()
        counter += 1
    return [round(int.from_bytes(digest[2 * i:2 * i + 2], "big") / 32768.0 - 1.0, 6)
            for i in range(dimensions)]


def openai_embeddings(body: Mapping[str, Any], count: Tokenizer = words) -> dict[str, Any]:
    inputs = body.get("input", [])
    inputs = [inputs] if isinstance(inputs, str) else list(inputs)
    dims = int(body.get("dimensions") or 8)
    tokens = sum(count(str(t)) for t in inputs)
    return {"object": "list", "model": body.get("model"),
            "data": [{"object": "embedding", "index": i, "embedding": embedding_vector(str(t), dims)}
                     for i, t in enumerate(inputs)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def openai_error(status: int, code: str | None, message: str) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 429:
        kind = "insufficient_quota" if code == "insufficient_quota" else "requests"
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def anthropic_message(body: Mapping[str, Any], count: Tokenizer = words) -> dict[str, Any]:
    messages = list(body.get("messages", []))
    content: list[dict[str, Any]] = []
    stop = "end_turn"
    if _wants_tool(body, messages):
        tool = body["tools"][0]["name"]
        content.append({"type": "tool_use", "id": "toolu_0", "name": tool,
                        "input": {"query": _text_of(messages[-1].get("content"))}})
        stop = "tool_use"
    else:
        text = _answer(messages)
        output = _cut(text, body.get("max_tokens"), count)
        stop = "max_tokens" if output != text else stop
        content.append({"type": "text", "text": output})
    output_tokens = sum(count(b.get("text", "")) for b in content) if stop != "tool_use" else 1
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": body.get("model"),
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": _prompt_tokens(messages, count, str(body.get("system", ""))),
                      "output_tokens": output_tokens}}


def anthropic_stream(full: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """The events that stream ``full``, an ``anthropic_message`` answer: the input side of its
    usage opens the stream, the output count ends it, as the Messages API sends them."""
    text = "".join(b.get("text", "") for b in full["content"])
    start = {**full, "content": [], "stop_reason": None, "usage": {**full["usage"], "output_tokens": 0}}
    yield "message_start", json.dumps({"type": "message_start", "message": start})
    yield "content_block_start", json.dumps({"type": "content_block_start", "index": 0,
                                             "content_block": {"type": "text", "text": ""}})
    for word in text.split(" "):
        yield "content_block_delta", json.dumps({"type": "content_block_delta", "index": 0,
                                                 "delta": {"type": "text_delta", "text": word + " "}})
    yield "content_block_stop", json.dumps({"type": "content_block_stop", "index": 0})
    yield "message_delta", json.dumps({"type": "message_delta", "delta": {"stop_reason": full["stop_reason"]},
                                       "usage": {"output_tokens": full["usage"].get("output_tokens", 0)}})
    yield "message_stop", json.dumps({"type": "message_stop"})


def anthropic_error(status: int, code: str | None, message: str) -> dict[str, Any]:
    kind = code or _ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}
