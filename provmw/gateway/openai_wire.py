"""The OpenAI wire of the gateway: chat completions (unary and SSE), completions, embeddings and
the model list, each a body mapped onto one ``ServiceManager`` call and its typed answer back.

The body's ``model`` only ever becomes ``configuration=``; every other field the gateway does not
map is ignored (an SDK sends fields a provider may not know).
"""

from __future__ import annotations

import array
import base64
import contextlib
import json
import time
import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from aiohttp import web

from provmw.gateway._endpoint import Call
from provmw.gateway.errors import GatewayRefusal, Refusal, invalid_field, refusal_of
from provmw.messages import ToolCall, messages_from
from provmw.responses import ChatChunk, CompletionResponse, Usage

__all__ = ["chat_completions", "completions", "embeddings", "json_response", "model_list", "open_stream",
           "options_of", "sse_response", "usage_of"]

# The body fields passed on as generation options (provmw.config.GenerationOptions).
OPTIONS = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "stop", "presence_penalty",
           "frequency_penalty", "tool_choice", "parallel_tool_calls", "reasoning_effort", "logprobs",
           "top_logprobs", "metadata")
SSE_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache"}


def json_response(payload: Mapping[str, Any]) -> web.Response:
    return web.Response(body=json.dumps(payload).encode(), content_type="application/json")


def options_of(body: Mapping[str, Any], names: tuple[str, ...] = OPTIONS) -> dict[str, Any]:
    """The generation options ``body`` gives; a ``response_format`` of ``json_schema`` is the call's schema."""
    options = {name: body[name] for name in names if body.get(name) is not None}
    if options.get("metadata") is not None and not options["metadata"]:
        del options["metadata"]
    return options


def schema_of(body: Mapping[str, Any], options: dict[str, Any]) -> Any:
    """``response_format: {"type": "json_schema", ...}`` as ``response_schema``; other formats stay options."""
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        given = fmt.get("json_schema") or {}
        if not isinstance(given, Mapping):
            raise invalid_field("response_format.json_schema", "must be an object")
        schema = given.get("schema") or {"type": "object"}
        if not isinstance(schema, Mapping):
            raise invalid_field("response_format.json_schema.schema", "must be an object")
        return schema
    if fmt is not None:
        options["response_format"] = fmt
    return None


def usage_of(usage: Usage | None) -> dict[str, Any]:
    """provmw's usage in OpenAI's names."""
    if usage is None:
        return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    return {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens}}


def _tool_call(call: ToolCall, index: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": call.id, "type": "function",
                           "function": {"name": call.name, "arguments": call.arguments}}
    if index is not None:
        out["index"] = index
    return out


def _chat_call(call: Call, stream: bool) -> Any:
    body = call.body
    options = options_of(body)
    if body.get("n") not in (None, 1):
        raise GatewayRefusal(Refusal(400, "invalid_request_error", "n must be 1", "invalid_request", "n"))
    keywords = {**call.keywords(), "options": options, "response_schema": schema_of(body, options)}
    messages, tools = messages_from(body.get("messages")), body.get("tools")
    manager = call.manager
    if tools:
        method = manager.stream_chat_with_tools if stream else manager.chat_with_tools
        return method(messages, tools, **keywords)
    return (manager.stream_chat if stream else manager.chat)(messages, **keywords)


async def chat_completions(call: Call) -> web.StreamResponse:
    """POST /v1/chat/completions."""
    if call.body.get("stream"):
        return await _chat_stream(call)
    answer: CompletionResponse = await _chat_call(call, stream=False)
    call.used(answer.usage)
    message: dict[str, Any] = {"role": "assistant", "content": answer.text if answer.text or not answer.tool_calls
                               else None}
    if answer.tool_calls:
        message["tool_calls"] = [_tool_call(c) for c in answer.tool_calls]
    return json_response({
        "id": answer.response_id or f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
        "created": int(time.time()), "model": call.model,
        "choices": [{"index": 0, "message": message, "finish_reason": answer.finish_reason or "stop",
                     "logprobs": None}],
        "usage": usage_of(answer.usage)})


async def open_stream(chunks: AsyncGenerator[ChatChunk, None]) -> ChatChunk | None:
    """The first chunk, read before the response starts, so a failure to open is a plain HTTP error."""
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        return None
    except BaseException:
        await chunks.aclose()
        raise


async def sse_response(call: Call) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(call.request)
    return response


async def _chat_stream(call: Call) -> web.StreamResponse:
    chunks: AsyncGenerator[ChatChunk, None] = _chat_call(call, stream=True)
    first = await open_stream(chunks)
    response = await sse_response(call)
    options = call.body.get("stream_options")
    include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
    head = json.dumps({"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
                       "created": int(time.time()), "model": call.model})[:-1]
    async with contextlib.aclosing(chunks):
        usage = await _write_chunks(response, head, first, chunks)
        call.used(usage)
        if usage is not _FAILED:
            if include_usage:
                await response.write(b"data: " + f'{head}, "choices": [], "usage": {json.dumps(usage_of(usage))}}}'
                                     .encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
    return response


_FAILED = Usage()  # a stream that ended in an error event


async def _write_chunks(response: web.StreamResponse, head: str, first: ChatChunk | None,
                        chunks: AsyncGenerator[ChatChunk, None]) -> Usage | None:
    """Write every chunk as a ``chat.completion.chunk`` event; the usage seen, or ``_FAILED``."""
    usage, tools = None, 0
    chunk, role = first, ', "role": "assistant"'
    try:
        while chunk is not None:
            delta = f'{{"content": {json.dumps(chunk.text)}{role}'
            if chunk.tool_calls:
                calls = [_tool_call(c, tools + i) for i, c in enumerate(chunk.tool_calls)]
                tools += len(calls)
                delta += f', "tool_calls": {json.dumps(calls)}'
            finish = "null" if chunk.finish_reason is None else json.dumps(chunk.finish_reason)
            await response.write(f'data: {head}, "choices": [{{"index": 0, "delta": {delta}}}, "finish_reason": '
                                 f'{finish}}}]}}\n\n'.encode())
            usage, role = chunk.usage or usage, ""
            chunk = await anext(chunks, None)
    except ConnectionResetError:  # the client went away: nobody is left to tell
        return _FAILED
    except Exception as exc:  # after the first byte only an in-band error event can say it
        refusal = refusal_of(exc)
        error = {"message": refusal.message, "type": refusal.kind, "code": refusal.code}
        await response.write(f"data: {json.dumps({'error': error})}\n\n".encode())
        return _FAILED
    return usage


async def completions(call: Call) -> web.StreamResponse:
    """POST /v1/completions (unary)."""
    if call.body.get("stream"):
        raise GatewayRefusal(Refusal(400, "invalid_request_error", "/v1/completions does not stream here; use "
                                     "/v1/chat/completions", "invalid_request", "stream"))
    prompt = call.body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise GatewayRefusal(Refusal(400, "invalid_request_error", "prompt must be a string", "invalid_request",
                                     "prompt"))
    answer = await call.manager.complete(prompt, options=options_of(call.body), **call.keywords())
    call.used(answer.usage)
    return json_response({
        "id": answer.response_id or f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
        "created": int(time.time()), "model": call.model,
        "choices": [{"index": 0, "text": answer.text, "finish_reason": answer.finish_reason or "stop",
                     "logprobs": None}],
        "usage": usage_of(answer.usage)})


async def embeddings(call: Call) -> web.StreamResponse:
    """POST /v1/embeddings; ``encoding_format: base64`` (the OpenAI SDK's default) as little-endian float32."""
    body = call.body
    inputs = body.get("input")
    if not isinstance(inputs, str | list):  # the manager says which items of a list are not strings
        raise invalid_field("input", "must be a string or a list of strings")
    dimensions = body.get("dimensions")
    answer = await call.manager.embed(inputs, dimensions=dimensions if isinstance(dimensions, int) else None,
                                      **call.keywords())
    call.used(answer.usage)
    encode = _base64 if body.get("encoding_format") == "base64" else list
    return json_response({
        "object": "list", "model": call.model,
        "data": [{"object": "embedding", "index": i, "embedding": encode(v)} for i, v in enumerate(answer.vectors)],
        "usage": {"prompt_tokens": answer.usage.input_tokens, "total_tokens": answer.usage.input_tokens}})


def _base64(vector: tuple[float, ...]) -> str:
    packed = array.array("f", vector)
    if array.array("H", [1]).tobytes() != b"\x01\x00":  # the wire is little-endian
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def model_list(names: tuple[str, ...], anthropic: bool) -> web.Response:
    """GET /v1/models, in OpenAI's shape, or Anthropic's for its SDK (it sends ``anthropic-version``)."""
    if anthropic:
        data = [{"type": "model", "id": n, "display_name": n, "created_at": "1970-01-01T00:00:00Z"} for n in names]
        return json_response({"data": data, "has_more": False, "first_id": names[0] if names else None,
                              "last_id": names[-1] if names else None})
    return json_response({"object": "list",
                          "data": [{"id": n, "object": "model", "created": 0, "owned_by": "provmw"} for n in names]})
