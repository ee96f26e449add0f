"""The Anthropic wire of the gateway: POST /v1/messages, unary and SSE, mapped onto the same
``ServiceManager`` chat calls as the OpenAI wire (so any configuration serves either wire)."""

from __future__ import annotations

import base64
import contextlib
import json
import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from aiohttp import web

from provmw.gateway._endpoint import Call
from provmw.gateway.errors import anthropic_error, invalid_field, refusal_of
from provmw.gateway.openai_wire import json_response, open_stream, sse_response
from provmw.messages import ContentPart, ImagePart, Message, TextPart, ToolCall
from provmw.responses import ChatChunk, CompletionResponse, Usage

__all__ = ["messages"]

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def _parts(content: Any, where: str) -> tuple[list[ContentPart], list[ToolCall], list[Message]]:
    """A turn's blocks: its content parts, its tool calls, and the tool results it carries."""
    if isinstance(content, str):
        return [TextPart(content)], [], []
    if not isinstance(content, list):
        raise invalid_field(f"{where}.content", "must be a string or a list of content blocks")
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    results: list[Message] = []
    for i, block in enumerate(content):
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            parts.append(TextPart(block.get("text")))
        elif kind == "image":
            parts.append(_image(block.get("source"), f"{where}.content[{i}].source"))
        elif kind == "tool_use":
            calls.append(ToolCall(block.get("id"), block.get("name"), json.dumps(block.get("input") or {})))
        elif kind == "tool_result":
            results.append(Message.tool(block.get("tool_use_id"), _text(block.get("content"))))
        elif kind not in ("thinking", "redacted_thinking"):
            raise invalid_field(f"{where}.content[{i}].type", "is not a supported content block type")
    return parts, calls, results


def _image(source: object, where: str) -> ImagePart:
    if not isinstance(source, Mapping):
        raise invalid_field(where, "must be an object")
    if source.get("type") == "url":
        return ImagePart(url=_string(source.get("url"), f"{where}.url"))
    data = source.get("data")
    if not isinstance(data, str):
        raise invalid_field(f"{where}.data", "must be a base64 string")
    try:
        decoded = base64.b64decode(data, validate=True)
    except ValueError:
        raise invalid_field(f"{where}.data", "is not valid base64") from None
    media_type = source.get("media_type")
    return ImagePart(data=decoded, media_type=_string(media_type, f"{where}.media_type") if media_type else
                     "image/png")


def _string(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise invalid_field(field, "must be a string")
    return value


def _tools(tools: object) -> list[dict[str, Any]]:
    """Anthropic's tools in provmw's shape (``provmw.messages.tools_from`` checks the rest)."""
    if not isinstance(tools, list):
        raise invalid_field("tools", "must be a list of tools")
    specs = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise invalid_field(f"tools[{i}]", "must be an object")
        specs.append({"name": tool.get("name"), "description": tool.get("description") or "",
                      "parameters": tool.get("input_schema") or {}})
    return specs


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(text for b in content if isinstance(b, Mapping) and b.get("type") == "text"
                       and isinstance(text := b.get("text"), str))
    return content if isinstance(content, str) else ""


def conversation(body: Mapping[str, Any]) -> list[Message]:
    """The body's system prompt and messages as provmw messages."""
    turns = [Message.system(_text(body["system"]))] if body.get("system") else []
    given = body.get("messages")
    if not isinstance(given, list) or not given:
        raise invalid_field("messages", "must be a non-empty list")
    for i, turn in enumerate(given):
        role = turn.get("role") if isinstance(turn, Mapping) else None
        if role not in ("user", "assistant"):
            raise invalid_field(f"messages[{i}].role", "must be user or assistant")
        parts, calls, results = _parts(turn.get("content"), f"messages[{i}]")
        turns += results
        if parts or calls:
            turns.append(Message.assistant(_text_of(parts), calls) if role == "assistant" else Message.user(parts))
    return turns


def _text_of(parts: list[ContentPart]) -> str:
    return "".join(p.text for p in parts if isinstance(p, TextPart))


def options(body: Mapping[str, Any]) -> dict[str, Any]:
    """The generation options of a Messages body, in provmw's (OpenAI's) names."""
    out = {name: body[name] for name in ("max_tokens", "temperature", "top_p", "top_k", "thinking")
           if body.get(name) is not None}
    if body.get("stop_sequences"):
        out["stop"] = body["stop_sequences"]
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping):
        kind = choice.get("type")
        out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}} if kind == "tool" \
            else TOOL_CHOICES.get(str(kind), "auto")
    return out


def _call(call: Call, stream: bool) -> Any:
    body = call.body
    keywords = {**call.keywords(), "options": options(body)}
    metadata = body.get("metadata")
    if keywords["user"] is None and isinstance(metadata, Mapping) and isinstance(metadata.get("user_id"), str):
        keywords["user"] = metadata["user_id"]
    turns, tools = conversation(body), body.get("tools")
    manager = call.manager
    if tools:
        specs = _tools(tools)
        return (manager.stream_chat_with_tools if stream else manager.chat_with_tools)(turns, specs, **keywords)
    return (manager.stream_chat if stream else manager.chat)(turns, **keywords)


def _usage(usage: Usage | None) -> dict[str, int]:
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0}
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "cache_read_input_tokens": usage.cached_input_tokens}


def _tool_block(tool: ToolCall) -> dict[str, Any]:
    arguments = tool.parsed_arguments() if tool.arguments else {}
    return {"type": "tool_use", "id": tool.id, "name": tool.name, "input": arguments}


async def messages(call: Call) -> web.StreamResponse:
    """POST /v1/messages."""
    if call.body.get("stream"):
        return await _stream(call)
    answer: CompletionResponse = await _call(call, stream=False)
    call.used(answer.usage)
    content = ([{"type": "text", "text": answer.text}] if answer.text or not answer.tool_calls else [])
    content += [_tool_block(t) for t in answer.tool_calls]
    return json_response({
        "id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant", "model": call.model,
        "content": content, "stop_reason": STOP_REASONS.get(answer.finish_reason or "stop", "end_turn"),
        "stop_sequence": None, "usage": _usage(answer.usage)})


def _event(kind: str, payload: Mapping[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **payload})}\n\n".encode()


async def _stream(call: Call) -> web.StreamResponse:
    chunks: AsyncGenerator[ChatChunk, None] = _call(call, stream=True)
    first = await open_stream(chunks)
    response = await sse_response(call)
    message: dict[str, Any] = {"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant",
                               "model": call.model, "content": [], "stop_reason": None, "stop_sequence": None,
                               "usage": _usage(None)}
    await response.write(_event("message_start", {"message": message}))
    async with contextlib.aclosing(chunks):
        await _blocks(call, response, first, chunks)
    return response


async def _blocks(call: Call, response: web.StreamResponse, first: ChatChunk | None,
                  chunks: AsyncGenerator[ChatChunk, None]) -> None:
    """The chunks as content blocks: text in one block, each tool call a block of its own."""
    index, text_open, usage, finish, chunk = 0, False, None, None, first
    try:
        while chunk is not None:
            if chunk.text:
                if not text_open:
                    await response.write(_event("content_block_start", {"index": index, "content_block":
                                                                         {"type": "text", "text": ""}}))
                    text_open = True
                await response.write(_event("content_block_delta", {"index": index, "delta":
                                                                     {"type": "text_delta", "text": chunk.text}}))
            for tool in chunk.tool_calls:
                if text_open:
                    await response.write(_event("content_block_stop", {"index": index}))
                    index, text_open = index + 1, False
                await _tool(response, index, tool)
                index += 1
            usage, finish = chunk.usage or usage, chunk.finish_reason or finish
            chunk = await anext(chunks, None)
    except ConnectionResetError:  # the client went away: nobody is left to tell
        return
    except Exception as exc:  # after the first byte only an in-band error event can say it
        error = json.loads(anthropic_error(refusal_of(exc)).text or "{}")["error"]
        await response.write(_event("error", {"error": error}))
        return
    if text_open:
        await response.write(_event("content_block_stop", {"index": index}))
    call.used(usage)
    await response.write(_event("message_delta", {"delta": {"stop_reason": STOP_REASONS.get(finish or "stop",
                                                                                             "end_turn"),
                                                             "stop_sequence": None}, "usage": _usage(usage)}))
    await response.write(_event("message_stop", {}))


async def _tool(response: web.StreamResponse, index: int, tool: ToolCall) -> None:
    block = {"type": "tool_use", "id": tool.id, "name": tool.name, "input": {}}
    await response.write(_event("content_block_start", {"index": index, "content_block": block}))
    await response.write(_event("content_block_delta", {"index": index, "delta": {"type": "input_json_delta",
                                                                                  "partial_json": tool.arguments}}))
    await response.write(_event("content_block_stop", {"index": index}))
