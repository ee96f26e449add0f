"""Deterministic answers and error bodies in the OpenAI and Anthropic wire formats.

Used by ``provmw.testing.FakeProvider``; kept apart so the server reads as routing
and fault injection only.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

__all__ = ["AnthropicWire", "FakeWire", "OpenAIWire", "Tokenizer", "anthropic_error", "anthropic_message",
           "anthropic_stream", "characters", "embedding_vector", "openai_chat", "openai_chat_stream",
           "openai_completion", "openai_embeddings", "openai_error", "schema_example", "sse", "tool_arguments",
           "tool_queries", "words"]

Tokenizer = Callable[[str], int]
CREATED = 1_767_225_600  # the fake's answers all say they were made at 2026-01-01T00:00:00Z

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


def _tool_results(message: Mapping[str, Any]) -> list[str]:
    """The texts of the tool results ``message`` carries: an OpenAI ``tool`` turn, Anthropic ``tool_result`` blocks."""
    if message.get("role") == "tool":
        return [_text_of(message.get("content"))]
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    return [_text_of(b.get("content")) for b in blocks if isinstance(b, Mapping) and b.get("type") == "tool_result"]


def _answer(messages: list[Any]) -> str:
    # after a tool result the echo carries it, as a real model answers from it: a round trip shows it arrived
    said = f" (tool said: {'; '.join(results)})" if messages and (results := _tool_results(messages[-1])) else ""
    last_user = next((_text_of(m.get("content")) for m in reversed(messages)
                      if m.get("role") == "user" and not _tool_results(m)), "")
    images = _images_in(messages)
    seen = f"I see {images} image{'s' if images != 1 else ''}. " if images else ""
    return f"{seen}echo: {last_user}{said}".strip()


def _prompt_tokens(messages: list[Any], count: Tokenizer, system: str = "") -> int:
    text_tokens = sum(count(_text_of(m.get("content"))) for m in messages)
    return (count(system) if system else 0) + text_tokens + 85 * _images_in(messages)


def _wants_tool(body: Mapping[str, Any], messages: list[Any]) -> bool:
    if not body.get("tools") or body.get("tool_choice") in ("none", {"type": "none"}):
        return False
    return not (messages and _tool_results(messages[-1]))


def tool_queries(messages: list[Any]) -> list[str]:
    """What the fake asks its first tool: one call per non-empty line of the last message."""
    text = _text_of(messages[-1].get("content"))
    return [line.strip() for line in text.splitlines() if line.strip()] or [text]


def tool_arguments(parameters: Mapping[str, Any], query: str) -> dict[str, Any]:
    """Arguments that fit a tool's declared ``parameters``: each required property (the first one
    when none is required) a value of its declared type, strings being ``query``; a tool that
    declares no properties gets ``{"query": query}``."""
    properties = parameters.get("properties") or {}
    if not properties:
        return {"query": query}
    names = [n for n in parameters.get("required") or () if n in properties] or list(properties)[:1]
    return {name: schema_example(properties[name], query, parameters) for name in names}


def schema_example(schema: Mapping[str, Any], text: str, root: Mapping[str, Any] | None = None) -> Any:
    """A value that follows ``schema`` (its first choice of everything), strings being ``text``:
    how the fake answers a response schema. ``$ref`` is followed within the root schema."""
    root = schema if root is None else root
    if isinstance(ref := schema.get("$ref"), str):
        target: Any = root
        for part in ref.removeprefix("#/").split("/"):
            target = target[part]
        return schema_example(target, text, root)
    if "const" in schema or "enum" in schema:
        return schema["const"] if "const" in schema else schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return schema_example(schema[key][0], text, root)
    kind = schema.get("type", "object")
    kind = next((k for k in kind if k != "null"), "null") if isinstance(kind, list) else kind
    if kind == "object":
        return {name: schema_example(sub, text, root) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [schema_example(schema.get("items", {}), text, root)]
    return {"string": text, "integer": 1, "number": 1.5, "boolean": True}.get(kind)


def _json_schema(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    form = body.get("response_format")
    return form["json_schema"]["schema"] if isinstance(form, Mapping) and form.get("type") == "json_schema" else None


def openai_chat(body: Mapping[str, Any], count: Tokenizer = words) -> dict[str, Any]:
    messages = list(body.get("messages", []))
    message: dict[str, Any] = {"role": "assistant", "content": _answer(messages)}
    if (schema := _json_schema(body)) is not None:
        message["content"] = json.dumps(schema_example(schema, message["content"]))
    finish = "stop"
    if _wants_tool(body, messages):
        tool = body["tools"][0]["function"]
        calls = [tool_arguments(tool.get("parameters") or {}, query) for query in tool_queries(messages)]
        message = {"role": "assistant", "content": None,
                   "tool_calls": [{"id": f"call_{i}", "type": "function",
                                   "function": {"name": tool["name"], "arguments": json.dumps(arguments)}}
                                  for i, arguments in enumerate(calls)]}
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


def openai_chat_stream(full: Mapping[str, Any], *, usage: bool = True) -> Iterator[str]:
    """The events that stream ``full``, an ``openai_chat`` answer, each a ``chat.completion.chunk``
    as the OpenAI API sends it; the usage event only when asked for (``stream_options.include_usage``)."""
    head = {"id": full["id"], "object": "chat.completion.chunk", "created": CREATED, "model": full["model"]}
    message = full["choices"][0]["message"]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": word + " "} for word in (message["content"] or "").split(" ") if message["content"]]
    for index, call in enumerate(message.get("tool_calls") or ()):
        deltas += _tool_call_deltas(index, call)
    finish = full["choices"][0]["finish_reason"]
    for delta in deltas:
        yield json.dumps({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    yield json.dumps({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if usage:
        yield json.dumps({**head, "choices": [], "usage": full["usage"]})
    yield "[DONE]"


def _tool_call_deltas(index: int, call: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """A tool call as OpenAI streams it: id and name first, then the arguments in pieces."""
    function = call["function"]
    yield {"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                           "function": {"name": function["name"], "arguments": ""}}]}
    arguments = function["arguments"]
    for start in range(0, len(arguments), 7):
        yield {"tool_calls": [{"index": index, "function": {"arguments": arguments[start:start + 7]}}]}


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
    forced = _forced_tool(body)
    if forced is not None:
        answer = schema_example(forced.get("input_schema", {}), _answer(messages))
        content.append({"type": "tool_use", "id": "toolu_0", "name": forced["name"], "input": answer})
        stop = "tool_use"
    elif _wants_tool(body, messages):
        tool = body["tools"][0]
        content += [{"type": "tool_use", "id": f"toolu_{i}", "name": tool["name"],
                     "input": tool_arguments(tool.get("input_schema") or {}, query)}
                    for i, query in enumerate(tool_queries(messages))]
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


def _forced_tool(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The tool ``tool_choice`` names, which the model must call; with ``{"type": "any"}`` after a tool's
    result, the last tool (where an adapter puts its answer tool: the result is in, the answer is due)."""
    choice = body.get("tool_choice")
    messages = body.get("messages") or []
    if isinstance(choice, Mapping) and choice.get("type") == "any" and messages and _tool_results(messages[-1]):
        tools: list[Mapping[str, Any]] = list(body.get("tools") or ())
        return tools[-1] if tools else None
    if not isinstance(choice, Mapping) or choice.get("type") != "tool":
        return None
    return next((t for t in body.get("tools", ()) if t.get("name") == choice.get("name")), None)


def anthropic_stream(full: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """The events that stream ``full``, an ``anthropic_message`` answer: the input side of its
    usage opens the stream, the output count ends it, as the Messages API sends them."""
    start = {**full, "content": [], "stop_reason": None, "usage": {**full["usage"], "output_tokens": 0}}
    yield "message_start", json.dumps({"type": "message_start", "message": start})
    for index, block in enumerate(full["content"]):
        yield from _anthropic_block(index, block)
    yield "message_delta", json.dumps({"type": "message_delta", "delta": {"stop_reason": full["stop_reason"]},
                                       "usage": {"output_tokens": full["usage"].get("output_tokens", 0)}})
    yield "message_stop", json.dumps({"type": "message_stop"})


def _anthropic_block(index: int, block: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """One content block as the Messages API streams it: start, deltas, stop."""
    if block["type"] == "text":
        head: dict[str, Any] = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": word + " "} for word in block["text"].split(" ")]
    else:
        head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        arguments = json.dumps(block["input"])
        deltas = [{"type": "input_json_delta", "partial_json": arguments[i:i + 7]}
                  for i in range(0, len(arguments), 7)]
    yield "content_block_start", json.dumps({"type": "content_block_start", "index": index, "content_block": head})
    for delta in deltas:
        yield "content_block_delta", json.dumps({"type": "content_block_delta", "index": index, "delta": delta})
    yield "content_block_stop", json.dumps({"type": "content_block_stop", "index": index})


def anthropic_error(status: int, code: str | None, message: str) -> dict[str, Any]:
    kind = code or _ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


class FakeWire(Protocol):
    """One wire format ``FakeProvider`` serves: its routes, answers, errors and stream frames.

    ``routes`` maps each route name (unique across the wires of one fake; faults and counts
    are keyed by it) to its aiohttp path. ``frames`` is the whole stream of an answer, one
    event per item; the fake inserts the stream faults (a stall, a cut, an in-band error, a
    malformed event) between them, so a wire only says how each looks in its format.
    """

    routes: Mapping[str, str]
    stream_content_type: str
    stream_preamble: bytes  # sent before the first event (an SSE comment), b"" for none
    keepalive: bytes  # what the fake writes while it stalls a stream with keepalives

    def model(self, route: str, path_model: str | None, body: Mapping[str, Any]) -> str: ...
    def streams(self, route: str, body: Mapping[str, Any]) -> bool: ...
    def answer(self, route: str, body: Mapping[str, Any], count: Tokenizer) -> dict[str, Any]: ...
    def with_usage(self, payload: dict[str, Any], usage: Mapping[str, Any]) -> dict[str, Any]: ...
    def frames(self, route: str, body: Mapping[str, Any], payload: Mapping[str, Any]) -> list[bytes]: ...
    def error_body(self, route: str, status: int, code: str | None, message: str) -> dict[str, Any]: ...
    def error_frame(self, route: str, code: str | None, message: str) -> bytes: ...
    def malformed_frame(self, route: str) -> bytes: ...

    # Optional (read with getattr, so a wire written before it still serves):
    # ``rate_limit_headers(remaining, reset_s) -> Mapping[str, str]``, the headers an answer under
    # a ``limit`` carries in this wire's style: requests left this minute, seconds until one more is let in.


def sse(data: str, event: str | None = None) -> bytes:
    """One server-sent event."""
    return (f"event: {event}\n" if event else "").encode() + f"data: {data}\n\n".encode()


class _SSEWire:
    stream_content_type = "text/event-stream"
    stream_preamble = b": fake provider stream\n\n"
    keepalive = b": keepalive\n\n"

    def model(self, route: str, path_model: str | None, body: Mapping[str, Any]) -> str:
        return str(body.get("model", ""))

    def streams(self, route: str, body: Mapping[str, Any]) -> bool:
        return bool(body.get("stream"))

    def with_usage(self, payload: dict[str, Any], usage: Mapping[str, Any]) -> dict[str, Any]:
        return {**payload, "usage": dict(usage)}

    def malformed_frame(self, route: str) -> bytes:
        return sse('{"choices": [{"delta": ')


class OpenAIWire(_SSEWire):
    """The OpenAI wire: chat completions, completions and embeddings under ``/v1``."""

    routes: Mapping[str, str] = {"chat": "/v1/chat/completions", "completion": "/v1/completions",
                                 "embedding": "/v1/embeddings"}

    def answer(self, route: str, body: Mapping[str, Any], count: Tokenizer) -> dict[str, Any]:
        make = {"chat": openai_chat, "completion": openai_completion, "embedding": openai_embeddings}[route]
        return make(body, count)

    def frames(self, route: str, body: Mapping[str, Any], payload: Mapping[str, Any]) -> list[bytes]:
        options = body.get("stream_options")
        usage = isinstance(options, Mapping) and options.get("include_usage") is True
        return [sse(data) for data in openai_chat_stream(payload, usage=usage)]

    def error_body(self, route: str, status: int, code: str | None, message: str) -> dict[str, Any]:
        return openai_error(status, code, message)

    def error_frame(self, route: str, code: str | None, message: str) -> bytes:
        return sse(json.dumps(openai_error(500, code or "server_error", message)))

    def rate_limit_headers(self, remaining: int, reset_s: float) -> dict[str, str]:
        """OpenAI's: the reset as a duration (``1.25s``)."""
        return {"x-ratelimit-remaining-requests": str(remaining), "x-ratelimit-reset-requests": f"{reset_s:.3f}s"}


class AnthropicWire(_SSEWire):
    """The Anthropic Messages wire at ``/v1/messages``."""

    routes: Mapping[str, str] = {"messages": "/v1/messages"}

    def answer(self, route: str, body: Mapping[str, Any], count: Tokenizer) -> dict[str, Any]:
        return anthropic_message(body, count)

    def frames(self, route: str, body: Mapping[str, Any], payload: Mapping[str, Any]) -> list[bytes]:
        return [sse(data, event) for event, data in anthropic_stream(payload)]

    def error_body(self, route: str, status: int, code: str | None, message: str) -> dict[str, Any]:
        return anthropic_error(status, code, message)

    def error_frame(self, route: str, code: str | None, message: str) -> bytes:
        return sse(json.dumps(anthropic_error(529, code or "overloaded_error", message)), "error")

    def rate_limit_headers(self, remaining: int, reset_s: float) -> dict[str, str]:
        """Anthropic's: the reset as an RFC 3339 time, on the wall clock."""
        # in whole ms, up: isoformat would cut the fraction, and a client waiting till then must be let in
        when = datetime.datetime.fromtimestamp(math.ceil((time.time() + reset_s) * 1000) / 1000, tz=datetime.UTC)
        return {"anthropic-ratelimit-requests-remaining": str(remaining),
                "anthropic-ratelimit-requests-reset": when.isoformat(timespec="milliseconds").replace("+00:00", "Z")}
