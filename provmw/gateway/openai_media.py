"""The OpenAI wire's operations beyond chat: Responses (unary and SSE), image generation, speech,
transcription (multipart), moderation, and rerank (Cohere's shape), each onto its manager call."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from aiohttp import web

from provmw.gateway._endpoint import Call, json_body
from provmw.gateway.errors import GatewayRefusal, Refusal, refusal_of
from provmw.gateway.keys import is_response_id
from provmw.gateway.openai_wire import json_response, open_stream, options_of, sse_response
from provmw.messages import ToolCall
from provmw.responses import ChatChunk, Usage

__all__ = ["form_body", "images", "moderations", "rerank", "responses", "speech", "transcriptions"]

RESPONSES_OPTIONS = ("temperature", "top_p", "max_output_tokens", "parallel_tool_calls", "tool_choice", "metadata",
                     "reasoning", "max_tool_calls")
log = logging.getLogger("provmw.gateway")
SPEECH_TYPES = {"mp3": "audio/mpeg", "opus": "audio/opus", "aac": "audio/aac", "flac": "audio/flac",
                "wav": "audio/wav", "pcm": "audio/pcm"}


def _invalid(message: str, param: str) -> GatewayRefusal:
    return GatewayRefusal(Refusal(400, "invalid_request_error", message, "invalid_request", param))


def _responses_usage(usage: Usage | None) -> dict[str, Any]:
    usage = usage or Usage()
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_input_tokens},
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens}}


def _respond_arguments(call: Call) -> dict[str, Any]:
    body = call.body
    tools = body.get("tools") or []
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, Mapping) else None
    return {"instructions": body.get("instructions"),
            "tools": [t for t in tools if isinstance(t, Mapping) and t.get("type", "function") == "function"],
            "builtin_tools": [t["type"] for t in tools if isinstance(t, Mapping) and t.get("type") != "function"],
            "previous_response_id": body.get("previous_response_id"), "store": bool(body.get("store", False)),
            "response_schema": fmt.get("schema") if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema"
            else None,
            "options": options_of(body, RESPONSES_OPTIONS), **call.keywords()}


def _input(call: Call) -> str | list[Any]:
    given = call.body.get("input")
    if not isinstance(given, str | list):
        raise _invalid("input must be a string or a list of input items", "input")
    return given


def _response(call: Call, response_id: str, status: str, output: list[Any], usage: Usage | None) -> dict[str, Any]:
    return {"id": response_id, "object": "response", "created_at": int(time.time()), "status": status,
            "model": call.model, "output": output, "usage": _responses_usage(usage), "error": None,
            "incomplete_details": None, "instructions": call.body.get("instructions"), "metadata": {},
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "temperature": None, "top_p": None}


async def _check_previous(call: Call, arguments: Mapping[str, Any]) -> None:
    """Refuse (404, as for an unknown id) a ``previous_response_id`` that no call of the caller's organisation
    made through this gateway: a stored conversation is only its maker's to continue (ADR 0055)."""
    previous = arguments["previous_response_id"]
    if previous is None:
        return
    if not isinstance(previous, str):
        raise _invalid("previous_response_id must be a string", "previous_response_id")
    if not is_response_id(previous) or await call.gateway.keys.response_owner(previous) != \
            call.caller.record.organisation:
        raise GatewayRefusal(Refusal(404, "invalid_request_error", f"Previous response with id "
                                     f"{repr(previous)[:80]} not found.", "previous_response_not_found",
                                     "previous_response_id"))


async def _record(call: Call, arguments: Mapping[str, Any], response_id: str | None) -> None:
    """Note the organisation of a stored response, so that it alone may continue it."""
    if response_id is None or not arguments["store"]:
        return  # an answer not stored cannot be continued: nothing to own
    try:
        await call.gateway.keys.record_response(response_id, call.caller.record.organisation)
    except Exception as exc:  # the answer is the client's already; only continuing it will be refused
        log.warning("response %.80s of %s not recorded (%s): it cannot be continued through the gateway",
                    response_id, call.caller.record.key_id, type(exc).__name__)


async def responses(call: Call) -> web.StreamResponse:
    """POST /v1/responses."""
    arguments = _respond_arguments(call)
    await _check_previous(call, arguments)
    if call.body.get("stream"):
        return await _responses_stream(call, arguments)
    answer = await call.manager.respond(_input(call), **arguments)
    call.used(answer.usage)
    await _record(call, arguments, answer.response_id)
    return json_response(_response(call, answer.response_id or f"resp_{uuid.uuid4().hex}", answer.status or
                                   "completed", [item.to_dict() for item in answer.output], answer.usage))


class _Events:
    """A Responses stream's events, numbered as the wire numbers them."""

    def __init__(self, response: web.StreamResponse) -> None:
        self.response, self.sequence = response, 0

    async def send(self, kind: str, payload: Mapping[str, Any]) -> None:
        event = {"type": kind, "sequence_number": self.sequence, **payload}
        self.sequence += 1
        await self.response.write(f"event: {kind}\ndata: {json.dumps(event)}\n\n".encode())


async def _responses_stream(call: Call, arguments: Mapping[str, Any]) -> web.StreamResponse:
    chunks: AsyncGenerator[ChatChunk, None] = call.manager.stream_respond(_input(call), **arguments)
    first = await open_stream(chunks)
    events = _Events(await sse_response(call))
    response_id, item_id = f"resp_{uuid.uuid4().hex}", f"msg_{uuid.uuid4().hex}"
    await events.send("response.created", {"response": _response(call, response_id, "in_progress", [], None)})
    item = {"type": "message", "id": item_id, "role": "assistant", "status": "in_progress", "content": []}
    await events.send("response.output_item.added", {"output_index": 0, "item": item})
    async with contextlib.aclosing(chunks):
        kept = await _response_events(call, events, response_id, item_id, first, chunks)
    await _record(call, arguments, kept)
    return events.response


async def _response_events(call: Call, events: _Events, response_id: str, item_id: str,
                           first: ChatChunk | None, chunks: AsyncGenerator[ChatChunk, None]) -> str | None:
    """The text as deltas of one message item, then each function call as an item of its own; the
    provider's id of the response (on the last chunk), named in ``response.completed``."""
    text: list[str] = []
    calls: list[ToolCall] = []
    usage, chunk, kept = None, first, None
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    try:
        while chunk is not None:
            if chunk.text:
                text.append(chunk.text)
                await events.send("response.output_text.delta", {**where, "delta": chunk.text})
            calls += chunk.tool_calls
            kept = chunk.response_id or kept
            usage, chunk = chunk.usage or usage, await anext(chunks, None)
    except ConnectionResetError:  # the client went away: nobody is left to tell
        return None
    except Exception as exc:  # after the first byte only an in-band error event can say it
        refusal = refusal_of(exc)
        await events.send("error", {"code": refusal.code, "message": refusal.message, "param": None})
        return None
    call.used(usage)
    whole = "".join(text)
    await events.send("response.output_text.done", {**where, "text": whole})
    item = {"type": "message", "id": item_id, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": whole, "annotations": []}]}
    await events.send("response.output_item.done", {"output_index": 0, "item": item})
    output = [item, *[await _function_call(events, index, tool) for index, tool in enumerate(calls, 1)]]
    completed = _response(call, kept or response_id, "completed", output, usage)
    await events.send("response.completed", {"response": completed})
    return kept


async def _function_call(events: _Events, index: int, tool: ToolCall) -> dict[str, Any]:
    item = {"type": "function_call", "id": f"fc_{tool.id}", "call_id": tool.id, "name": tool.name,
            "arguments": tool.arguments, "status": "completed"}
    await events.send("response.output_item.added", {"output_index": index,
                                                      "item": {**item, "arguments": "", "status": "in_progress"}})
    await events.send("response.function_call_arguments.done", {"item_id": item["id"], "output_index": index,
                                                                "arguments": tool.arguments})
    await events.send("response.output_item.done", {"output_index": index, "item": item})
    return item


async def images(call: Call) -> web.StreamResponse:
    """POST /v1/images/generations."""
    body = call.body
    prompt, n = body.get("prompt"), body.get("n", 1)
    if not isinstance(prompt, str):
        raise _invalid("prompt must be a string", "prompt")
    answer = await call.manager.generate_image(prompt, size=body.get("size"), quality=body.get("quality"),
                                               n=n if isinstance(n, int) else 1, **call.keywords())
    call.used(answer.usage)
    data = [{"url": i.url, "revised_prompt": i.revised_prompt} if i.data is None else
            {"b64_json": base64.b64encode(i.data).decode("ascii"), "revised_prompt": i.revised_prompt}
            for i in answer.images]
    return json_response({"created": int(time.time()), "data": data})


async def speech(call: Call) -> web.StreamResponse:
    """POST /v1/audio/speech: the audio bytes."""
    body = call.body
    text, fmt = body.get("input"), body.get("response_format") or "mp3"
    if not isinstance(text, str):
        raise _invalid("input must be a string", "input")
    answer = await call.manager.speak(text, voice=body.get("voice") or "alloy", audio_format=fmt, **call.keywords())
    call.used(answer.usage)
    return web.Response(body=answer.audio, content_type=SPEECH_TYPES.get(fmt, answer.media_type))


async def form_body(request: web.Request) -> Mapping[str, Any]:
    """A multipart form as a mapping (the file's bytes and name under ``file`` and ``filename``)."""
    if not request.content_type.startswith("multipart/"):
        return await json_body(request)
    try:
        form = await request.post()
    except web.HTTPRequestEntityTooLarge:
        raise GatewayRefusal(Refusal(413, "invalid_request_error", f"request body over {request.client_max_size} "
                                     "bytes", "request_too_large")) from None
    out: dict[str, Any] = {}
    for name, value in form.items():
        if isinstance(value, web.FileField):
            out[name], out["filename"] = value.file.read(), value.filename
        else:
            out[name] = value
    return out


async def transcriptions(call: Call) -> web.StreamResponse:
    """POST /v1/audio/transcriptions (multipart: ``file``, ``model``, ``language``, ``prompt``)."""
    body = call.body
    audio = body.get("file")
    if not isinstance(audio, bytes) or not audio:
        raise _invalid("file must be an uploaded audio file", "file")
    answer = await call.manager.transcribe(audio, filename=body.get("filename") or "audio.wav",
                                           language=body.get("language"), prompt=body.get("prompt"),
                                           **call.keywords())
    call.used(answer.usage)
    if body.get("response_format") == "text":
        return web.Response(text=answer.text, content_type="text/plain")
    return json_response({"text": answer.text, **({"language": answer.language} if answer.language else {})})


async def moderations(call: Call) -> web.StreamResponse:
    """POST /v1/moderations."""
    given = call.body.get("input")
    if not isinstance(given, str | list):
        raise _invalid("input must be a string or a list of strings", "input")
    answer = await call.manager.moderate(given, **call.keywords())
    call.used(answer.usage)
    return json_response({"id": answer.response_id or f"modr-{uuid.uuid4().hex}", "model": call.model,
                          "results": [{"flagged": r.flagged, "categories": dict(r.categories),
                                       "category_scores": dict(r.scores)} for r in answer.results]})


async def rerank(call: Call) -> web.StreamResponse:
    """POST /v1/rerank, in Cohere's shape (``query``, ``documents``, ``top_n``; ``results`` by relevance)."""
    body = call.body
    query, documents, top_n = body.get("query"), body.get("documents"), body.get("top_n")
    if not isinstance(query, str) or not isinstance(documents, list):
        raise _invalid("rerank needs query (a string) and documents (a list)", "documents")
    texts: list[Any] = [d.get("text") if isinstance(d, Mapping) else d for d in documents]
    answer = await call.manager.rerank(query, texts, top_n=top_n if isinstance(top_n, int) else None,
                                       **call.keywords())
    call.used(answer.usage)
    return json_response({"id": answer.response_id or str(uuid.uuid4()), "model": call.model,
                          "results": [{"index": r.index, "relevance_score": r.relevance_score}
                                      for r in answer.results],
                          "meta": {"billed_units": {"search_units": 1}}})
