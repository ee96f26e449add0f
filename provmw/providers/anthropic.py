"""Anthropic Messages API adapter: chat, tools, images, streaming, structured output; no
embeddings, no bare completion (the legacy completions API is retired), no ``response_format``.

A ``response_schema`` travels as a forced tool whose input is the answer (ADR 0024): the
tool's input comes back as the response's text, JSON, and never as a tool call.

Every field read from an answer or an event is type-checked (``_serde``): a wrong type is a
``MalformedResponseError`` naming the field, never an answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from provmw._base import serde
from provmw.config import ProviderConfig
from provmw.errors import (
    AuthenticationError,
    InvalidRequestError,
    MalformedResponseError,
    ProviderUnavailableError,
    RateLimitError,
    UnsupportedOperationError,
)
from provmw.http import (
    COMMON_CODES,
    ErrorCodes,
    HttpClient,
    InBandError,
    SSEEvent,
    anthropic_rate_limit,
    decode_json,
    malformed,
    plain_json,
    wire_errors,
)
from provmw.messages import ImagePart, Message, TextPart, ToolCall, ToolSpec
from provmw.providers import Capabilities
from provmw.providers._opening import OpeningHint
from provmw.providers._usage import UsageBody
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest, merged_options
from provmw.responses import ChatChunk, CompletionResponse, EmbeddingResponse, Usage
from provmw.streams import ToolCallAssembler
from provmw.wire import with_extra_body

__all__ = ["AnthropicAdapter"]

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 1024  # the API requires max_tokens; this applies when options give none

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

_PASSED_OPTIONS = {"temperature": "temperature", "top_p": "top_p", "stop": "stop_sequences", "top_k": "top_k",
                   "thinking": "thinking", "metadata": "metadata"}
# Read for the body's max_tokens (which the API requires), in this order.
_OUTPUT_BOUNDS = ("max_tokens", "max_completion_tokens")
# The forced tool that carries a response_schema; its input is the answer.
ANSWER_TOOL = "structured_answer"
_ANSWER_DESCRIPTION = "Give your answer: the input of this tool is the whole answer, following its schema."
# What a malformed answer raises while it is read; ``malformed`` turns each into one error.
_SHAPE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError)


def _extract_error(body: Any) -> tuple[str | None, str | None]:
    error = body["error"]
    kind, message = error.get("type"), error.get("message")
    if kind == "invalid_request_error" and "prompt is too long" in (message or ""):
        kind = "context_length_exceeded"
    return kind, message


ERROR_CODES = ErrorCodes(
    extract=_extract_error,
    codes={
        **COMMON_CODES,
        "overloaded_error": ProviderUnavailableError,
        "api_error": ProviderUnavailableError,
        "rate_limit_error": RateLimitError,
        "authentication_error": AuthenticationError,
        "permission_error": AuthenticationError,
        "not_found_error": InvalidRequestError,
        "invalid_request_error": InvalidRequestError,
        "request_too_large": InvalidRequestError,
    },
)


def _headers(config: ProviderConfig) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "anthropic-version": API_VERSION, **config.headers}
    if config.api_key:
        headers["x-api-key"] = config.api_key.reveal()
    return headers


def _url(config: ProviderConfig) -> str:
    return (config.base_url or DEFAULT_BASE_URL).rstrip("/") + "/v1/messages"


def _block(part: TextPart | ImagePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if part.url is not None:
        return {"type": "image", "source": {"type": "url", "url": part.url}}
    return {"type": "image", "source": {"type": "base64", "media_type": part.media_type, "data": part.base64}}


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [{"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.text}]
    blocks = [_block(p) for p in message.content]
    blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.parsed_arguments()}
               for c in message.tool_calls]
    return blocks


def _messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Wire messages; tool results travel as user turns, and same-role turns merge."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(_blocks(message))
        else:
            out.append({"role": role, "content": _blocks(message)})
    return out


def _tool_choice(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        name = value.get("name") or value.get("function", {}).get("name")
        return {"type": "tool", "name": name}
    return {"auto": {"type": "auto"}, "none": {"type": "none"}}.get(value, {"type": "any"})


def _tool(tool: ToolSpec) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": plain_json(tool.parameters)}


def _usage(usage: object, model: str) -> Usage:
    """Anthropic's ``input_tokens`` leaves the cache out: the whole is it plus reads plus writes.

    ``cache_creation`` splits the writes by TTL; writes it does not attribute (or every write,
    when it is absent) are 5-minute ones, the API's default TTL.
    """
    body = UsageBody.of(usage, provider="anthropic", model=model)
    reads, writes = body.count("cache_read_input_tokens"), body.count("cache_creation_input_tokens")
    hour = body.count("cache_creation", "ephemeral_1h_input_tokens")
    minutes = body.count("cache_creation", "ephemeral_5m_input_tokens")
    if minutes + hour > writes and body.has("cache_creation_input_tokens"):
        raise MalformedResponseError(
            f"usage.cache_creation ({minutes + hour} tokens by TTL) exceeds cache_creation_input_tokens ({writes})",
            provider="anthropic", model=model)
    minutes = max(writes - hour, minutes)
    return body.usage(
        input_tokens=body.count("input_tokens") + reads + minutes + hour,
        output_tokens=body.count("output_tokens"),
        cached_input_tokens=reads, cache_write_5m_tokens=minutes, cache_write_1h_tokens=hour,
    )


def _answer_blocks(blocks: Any, structured: bool) -> tuple[str, tuple[ToolCall, ...]]:
    """The text and tool calls of a message's ``content`` blocks; other block types are skipped.
    When ``structured``, the input of the answer tool is the whole text."""
    text: list[str] = []
    calls: list[ToolCall] = []
    for i, value in enumerate(serde.sequence(blocks, "response.content")):
        where = f"response.content[{i}]"
        block = serde.mapping(value, where)
        kind = serde.get(block, "type", str, where)
        if kind == "text":
            text.append(serde.get(block, "text", str, where))
        elif kind == "tool_use":
            arguments = json.dumps(serde.get(block, "input", dict, where, default={}))
            name = serde.get(block, "name", str, where)
            if structured and name == ANSWER_TOOL:
                return arguments, ()
            calls.append(ToolCall(id=serde.get(block, "id", str, where), name=name, arguments=arguments))
    return "".join(text), tuple(calls)


def _with_answer_tool(body: dict[str, Any], schema: Mapping[str, Any]) -> None:
    """Force the answer through a tool whose input schema is ``schema``; with tools of the
    caller's too, the model must call one of them or answer."""
    tool = {"name": ANSWER_TOOL, "description": _ANSWER_DESCRIPTION, "input_schema": plain_json(schema)}
    body["tool_choice"] = {"type": "any"} if body.get("tools") else {"type": "tool", "name": ANSWER_TOOL}
    body["tools"] = [*body.get("tools", ()), tool]


def _finish_reason(data: Mapping[str, Any], where: str) -> str | None:
    reason = serde.get(data, "stop_reason", str, where, default=None)
    return FINISH_REASONS.get(reason, reason) if reason is not None else None


class AnthropicAdapter:
    """The Anthropic Messages wire format."""

    name = "anthropic"
    api_key_env = "ANTHROPIC_API_KEY"
    default_base_url = DEFAULT_BASE_URL
    capabilities = Capabilities(completion=False, embeddings=False, schema=True)

    def chat_body(self, config: ProviderConfig, request: ChatRequest) -> dict[str, Any]:
        """The JSON body of a Messages call, as the Anthropic API documents it."""
        options = merged_options(config, request.options)
        if "response_format" in options:  # never sent without it: the caller asked for a format
            raise UnsupportedOperationError(self.name, "response_format", configuration=config.identifier)
        body: dict[str, Any] = {
            "model": config.model,
            "max_tokens": next((options[k] for k in _OUTPUT_BOUNDS if k in options), DEFAULT_MAX_TOKENS),
            "messages": _messages(request.messages),
        }
        if system := "\n\n".join(m.text for m in request.messages if m.role == "system"):
            body["system"] = system
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
            if "tool_choice" in options:
                body["tool_choice"] = _tool_choice(options["tool_choice"])
        if request.response_schema is not None:
            _with_answer_tool(body, request.response_schema)
        for name, wire in _PASSED_OPTIONS.items():
            if name in options:
                value = options[name]
                body[wire] = [value] if wire == "stop_sequences" and isinstance(value, str) else plain_json(value)
        ignored = set(options) - {*_PASSED_OPTIONS, *_OUTPUT_BOUNDS, "tool_choice", "extra_body"}
        if ignored:
            log.debug("anthropic ignores options %s", sorted(ignored))
        return with_extra_body(body, options)

    async def chat(self, http: HttpClient, config: ProviderConfig,
                   request: ChatRequest) -> CompletionResponse:
        with wire_errors(ERROR_CODES, provider=self.name, model=config.model):
            data, headers = await http.post_json_with_headers(_url(config), self.chat_body(config, request),
                                                              _headers(config))
        try:
            body = serde.mapping(data, "response")
            structured = request.response_schema is not None
            text, calls = _answer_blocks(serde.get(body, "content", list, "response"), structured)
            finish = _finish_reason(body, "response")
            if structured and not calls and finish == "tool_calls":  # the answer tool's call is the answer
                finish = "stop"
            return CompletionResponse(
                provider=self.name, model=serde.get(body, "model", str, "response", default=None) or config.model,
                usage=_usage(body.get("usage"), config.model), served_by=config.identifier, text=text,
                tool_calls=calls, finish_reason=finish,
                response_id=serde.get(body, "id", str, "response", default=None),
                rate_limit=anthropic_rate_limit(headers),
            )
        except _SHAPE_ERRORS as exc:
            raise malformed(self.name, config.model, exc) from None

    async def complete(self, http: HttpClient, config: ProviderConfig,
                       request: CompletionRequest) -> CompletionResponse:
        raise UnsupportedOperationError(self.name, "completion")

    async def embed(self, http: HttpClient, config: ProviderConfig,
                    request: EmbeddingRequest) -> EmbeddingResponse:
        raise UnsupportedOperationError(self.name, "embedding")

    async def stream_chat(self, http: HttpClient, config: ProviderConfig,
                          request: ChatRequest) -> AsyncIterator[ChatChunk]:
        body = {**self.chat_body(config, request), "stream": True}
        opening = OpeningHint(anthropic_rate_limit)
        events = http.post_sse_with_headers(_url(config), body, _headers(config), on_headers=opening.headers)
        usage: dict[str, Any] = {}
        calls = ToolCallAssembler()
        # With a response_schema the answer comes as the forced answer tool's input: its blocks
        # (indexes noted here) stream as the answer's text, as ``chat`` makes it the text.
        answer: set[int] | None = set() if request.response_schema is not None else None
        with wire_errors(ERROR_CODES, provider=self.name, model=config.model):
            async for event in events:
                try:
                    data = serde.mapping(decode_json(event.data), "event")
                    if event.event == "error" or data.get("type") == "error":
                        raise InBandError(event.data)
                    chunk = _stream_chunk(event, data, usage, calls, config.model, answer)
                except _SHAPE_ERRORS as exc:
                    raise malformed(self.name, config.model, exc) from None
                if chunk is not None:
                    yield opening.first(chunk)
                if data.get("type") == "message_stop":
                    return
        raise MalformedResponseError("stream ended before message_stop", provider=self.name,
                                     model=config.model)


def _stream_chunk(event: SSEEvent, data: Mapping[str, Any], usage: dict[str, Any], calls: ToolCallAssembler,
                  model: str, answer: set[int] | None = None) -> ChatChunk | None:
    kind = serde.get(data, "type", str, "event", default=None) or event.event
    if kind == "message_start":
        message = serde.get(data, "message", dict, "event", default=None) or {}
        usage.update(serde.get(message, "usage", dict, "event.message", default=None) or {})
    elif kind == "content_block_start":
        block = serde.get(data, "content_block", dict, "event")
        if block.get("type") == "tool_use":
            index, name = serde.get(data, "index", int, "event"), serde.get(block, "name", str, "event.content_block")
            if answer is not None and name == ANSWER_TOOL:
                answer.add(index)
            else:
                calls.add(index, id=serde.get(block, "id", str, "event.content_block"), name=name)
    elif kind == "content_block_delta":
        delta = serde.get(data, "delta", dict, "event")
        if delta.get("type") == "text_delta":
            return ChatChunk(text=serde.get(delta, "text", str, "event.delta"))
        if delta.get("type") == "input_json_delta":
            index, piece = serde.get(data, "index", int, "event"), serde.get(delta, "partial_json", str, "event.delta")
            if answer and index in answer:
                return ChatChunk(text=piece)
            calls.add(index, arguments=piece)
    elif kind == "message_delta":
        usage.update(serde.get(data, "usage", dict, "event", default=None) or {})
        delta = serde.get(data, "delta", dict, "event", default=None) or {}
        finish, tool_calls = _finish_reason(delta, "event.delta"), calls.calls()
        if answer and not tool_calls and finish == "tool_calls":  # the answer tool's call is the answer
            finish = "stop"
        return ChatChunk(finish_reason=finish, usage=_usage(usage, model), tool_calls=tool_calls)
    return None


