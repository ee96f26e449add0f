"""OpenAI-compatible adapter: chat completions, completions, embeddings, streaming.

Works against any server speaking the OpenAI wire format (OpenAI, vLLM, llama.cpp
server, Ollama's ``/v1``, LM Studio, gateways): ``base_url`` is the part before
``/chat/completions``. Every field read from an answer is type-checked (``_serde``): a
wrong type is a ``MalformedResponseError`` naming the field, never an answer.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from provmw._base import serde
from provmw.config import ProviderConfig
from provmw.errors import InvalidDataError, MalformedResponseError
from provmw.http import (
    ErrorCodes,
    FormFile,
    HttpClient,
    InBandError,
    decode_json,
    malformed,
    openai_rate_limit,
    plain_json,
    wire_errors,
)
from provmw.messages import ImagePart, Message, TextPart, ToolCall, ToolSpec
from provmw.providers import Capabilities, _openai_responses
from provmw.providers._opening import OpeningHint
from provmw.providers._usage import UsageBody
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest, merged_options
from provmw.responses import ChatChunk, CompletionResponse, EmbeddingResponse, RateLimitHint, Usage
from provmw.streams import ToolCallAssembler
from provmw.wire import with_extra_body

if TYPE_CHECKING:
    from provmw.operations.audio import SpeechRequest, SpeechResponse, TranscriptionRequest, TranscriptionResponse
    from provmw.operations.images import ImageEditRequest, ImageRequest, ImageResponse
    from provmw.operations.moderation import ModerationRequest, ModerationResponse
    from provmw.operations.responses_api import ResponsesRequest, ResponsesResponse

__all__ = ["OpenAIAdapter"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Anthropic's shape of extended thinking; the OpenAI API's own knob is reasoning_effort.
_IGNORED_OPTIONS = frozenset({"thinking"})
_SCHEMA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

log = logging.getLogger(__name__)


def _extract_error(body: Any) -> tuple[str | None, str | None]:
    error = body["error"]
    if isinstance(error, str):
        return None, error
    return error.get("code") or error.get("type"), error.get("message")


ERROR_CODES = ErrorCodes(extract=_extract_error, not_found_hint="; does base_url end in /v1?")


def _headers(config: ProviderConfig) -> dict[str, str]:
    headers = {"Content-Type": "application/json", **config.headers}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key.reveal()}"
    return headers


def _url(config: ProviderConfig, path: str) -> str:
    return (config.base_url or DEFAULT_BASE_URL).rstrip("/") + path


def _part(part: TextPart | ImagePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    return {"type": "image_url", "image_url": {"url": part.data_url}}


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
    out: dict[str, Any] = {"role": message.role}
    if message.images:
        out["content"] = [_part(p) for p in message.content]
    else:
        out["content"] = message.text if message.content or not message.tool_calls else None
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    return out


def _tool(tool: ToolSpec) -> dict[str, Any]:
    function = {"name": tool.name, "description": tool.description, "parameters": plain_json(tool.parameters)}
    return {"type": "function", "function": function}


def _with_options(body: dict[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    if ignored := _IGNORED_OPTIONS.intersection(options):
        log.debug("openai ignores options %s", sorted(ignored))
    for name, value in options.items():
        if name == "response_format" and isinstance(value, str):
            value = {"type": value}
        if name != "extra_body" and name not in _IGNORED_OPTIONS:
            body[name] = plain_json(value)
    return with_extra_body(body, options)


# What a malformed answer raises while it is read; ``malformed`` turns each into one error.
_SHAPE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError)
_NUMBER_TYPES = frozenset({int, float})


def _body(data: Any) -> Mapping[str, Any]:
    return serde.mapping(data, "response")


def _first_choice(body: Mapping[str, Any]) -> Mapping[str, Any]:
    choices = serde.get(body, "choices", list, "response")
    if not choices:
        raise InvalidDataError("response.choices: empty")
    return serde.mapping(choices[0], "response.choices[0]")


def _model(body: Mapping[str, Any], config: ProviderConfig) -> str:
    return serde.get(body, "model", str, "response", default=None) or config.model


def _text(data: Mapping[str, Any], key: str, where: str) -> str:
    return serde.get(data, key, str, where, default=None) or ""


def _finish_reason(choice: Mapping[str, Any], where: str) -> str | None:
    return serde.get(choice, "finish_reason", str, where, default=None)


def _vector(row: Mapping[str, Any], where: str) -> list[float]:
    """A vector of finite numbers; one pass over the types and one sum keep big vectors cheap."""
    vector = serde.get(row, "embedding", list, where)
    if not {type(x) for x in vector} <= _NUMBER_TYPES or not math.isfinite(sum(vector)):
        raise InvalidDataError(f"{where}.embedding: expected finite numbers")
    return vector


def _usage(data: Any, model: str) -> Usage:
    """OpenAI's counts already include their parts: prompt_tokens holds the cached ones,
    completion_tokens the reasoning ones. A gateway's cache writes carry no TTL: 5 minutes."""
    body = UsageBody.of(data.get("usage"), provider="openai", model=model)
    return body.usage(
        input_tokens=body.count("prompt_tokens"),
        output_tokens=body.count("completion_tokens"),
        cached_input_tokens=body.count("prompt_tokens_details", "cached_tokens"),
        cache_write_5m_tokens=body.count("prompt_tokens_details", "cache_write_tokens"),
        reasoning_tokens=body.count("completion_tokens_details", "reasoning_tokens"),
    )


def _tool_call(value: Any, where: str) -> ToolCall:
    call = serde.mapping(value, where)
    function = serde.get(call, "function", dict, where)
    return ToolCall(id=serde.get(call, "id", str, where), name=serde.get(function, "name", str, f"{where}.function"),
                    arguments=serde.get(function, "arguments", str, f"{where}.function", default=None) or "{}")


def _tool_calls(message: Mapping[str, Any]) -> tuple[ToolCall, ...]:
    calls = serde.get(message, "tool_calls", list, "message", default=None) or ()
    return tuple(_tool_call(c, f"message.tool_calls[{i}]") for i, c in enumerate(calls))


class OpenAIAdapter:
    """The OpenAI wire format."""

    name = "openai"
    api_key_env = "OPENAI_API_KEY"
    default_base_url: str | None = DEFAULT_BASE_URL
    capabilities = Capabilities(schema=True, response_format=True, moderation=True, images=True,
                                image_edits=True, transcription=True, speech=True, responses=True, web_search=True,
                                file_search=True, code_interpreter=True)

    async def chat(self, http: HttpClient, config: ProviderConfig,
                   request: ChatRequest) -> CompletionResponse:
        data, hint = await self._post(http, config, "/chat/completions", self.chat_body(config, request))
        try:
            body = _body(data)
            choice = _first_choice(body)
            message = serde.get(choice, "message", dict, "response.choices[0]")
            return CompletionResponse(
                provider=self.name, model=_model(body, config), usage=_usage(body, config.model),
                served_by=config.identifier, text=_text(message, "content", "message"),
                tool_calls=_tool_calls(message), finish_reason=_finish_reason(choice, "response.choices[0]"),
                response_id=serde.get(body, "id", str, "response", default=None), rate_limit=hint,
            )
        except _SHAPE_ERRORS as exc:
            raise malformed(self.name, config.model, exc) from None

    async def complete(self, http: HttpClient, config: ProviderConfig,
                       request: CompletionRequest) -> CompletionResponse:
        body = _with_options({"model": config.model, "prompt": request.prompt},
                             merged_options(config, request.options))
        body.pop("tool_choice", None)
        data, hint = await self._post(http, config, "/completions", body)
        try:
            answer = _body(data)
            choice = _first_choice(answer)
            return CompletionResponse(
                provider=self.name, model=_model(answer, config), usage=_usage(answer, config.model),
                served_by=config.identifier, text=_text(choice, "text", "response.choices[0]"),
                finish_reason=_finish_reason(choice, "response.choices[0]"),
                response_id=serde.get(answer, "id", str, "response", default=None), rate_limit=hint,
            )
        except _SHAPE_ERRORS as exc:
            raise malformed(self.name, config.model, exc) from None

    async def embed(self, http: HttpClient, config: ProviderConfig,
                    request: EmbeddingRequest) -> EmbeddingResponse:
        body: dict[str, Any] = {"model": config.model, "input": list(request.inputs),
                                "encoding_format": "float"}
        if request.dimensions is not None:
            body["dimensions"] = request.dimensions
        data, hint = await self._post(http, config, "/embeddings", body)
        try:
            answer = _body(data)
            rows = _rows(answer, len(request.inputs))
            return EmbeddingResponse(
                provider=self.name, model=_model(answer, config), usage=_usage(answer, config.model),
                served_by=config.identifier,
                vectors=[_vector(row, f"response.data[{i}]") for i, row in enumerate(rows)], rate_limit=hint,
            )
        except _SHAPE_ERRORS as exc:
            raise malformed(self.name, config.model, exc) from None

    async def respond(self, http: HttpClient, config: ProviderConfig, request: ResponsesRequest) -> ResponsesResponse:
        """The Responses API's own wire (``provmw.providers._openai_responses``)."""
        return await _openai_responses.respond(http, config, request, provider=self.name,
                                               url=_url(config, "/responses"), headers=_headers(config))

    def stream_respond(self, http: HttpClient, config: ProviderConfig,
                       request: ResponsesRequest) -> AsyncIterator[ChatChunk]:
        return _openai_responses.stream_respond(http, config, request, provider=self.name,
                                                url=_url(config, "/responses"), headers=_headers(config))

    async def stream_chat(self, http: HttpClient, config: ProviderConfig,
                          request: ChatRequest) -> AsyncIterator[ChatChunk]:
        body = self.chat_body(config, request)
        body.update(stream=True, stream_options={"include_usage": True})
        opening = OpeningHint(openai_rate_limit)
        events = http.post_sse_with_headers(_url(config, "/chat/completions"), body, _headers(config),
                                            on_headers=opening.headers)
        # Tool calls come in pieces, and the finish reason and the usage in separate events:
        # the last chunk carries the calls, whole, with both.
        calls, last = ToolCallAssembler(), ChatChunk()
        with wire_errors(ERROR_CODES, provider=self.name, model=config.model):
            async for event in events:
                if event.data.strip() == "[DONE]":
                    yield opening.first(self._last(config, last, calls))
                    return
                data = self._event(config, event.data)
                if data.get("error") is not None:
                    raise InBandError(event.data)
                chunk = self._stream_chunk(config, data, calls)
                if chunk.finish_reason is None and chunk.usage is None:
                    if chunk.text:
                        yield opening.first(chunk)
                    continue
                last = ChatChunk(finish_reason=chunk.finish_reason or last.finish_reason,
                                 usage=chunk.usage or last.usage)
                if chunk.text:
                    yield opening.first(ChatChunk(text=chunk.text))
        raise MalformedResponseError("stream ended before [DONE]", provider=self.name, model=config.model)

    def _event(self, config: ProviderConfig, data: str) -> Mapping[str, Any]:
        try:
            return serde.mapping(decode_json(data), "event")
        except _SHAPE_ERRORS as exc:
            raise malformed(self.name, config.model, exc) from None

    def _stream_chunk(self, config: ProviderConfig, data: Mapping[str, Any], calls: ToolCallAssembler) -> ChatChunk:
        try:
            return _chunk(data, config.model, calls)
        except _SHAPE_ERRORS as exc:
            raise malformed(self.name, config.model, exc) from None

    def _last(self, config: ProviderConfig, last: ChatChunk, calls: ToolCallAssembler) -> ChatChunk:
        try:
            return attrs.evolve(last, tool_calls=calls.calls())
        except _SHAPE_ERRORS as exc:
            raise malformed(self.name, config.model, exc) from None

    async def moderate(self, http: HttpClient, config: ProviderConfig,
                       request: ModerationRequest) -> ModerationResponse:
        """Classify each input against OpenAI's content policy (``/moderations``)."""
        from provmw.providers._openai_moderation import moderate

        return await moderate(self, http, config, request)

    async def generate_image(self, http: HttpClient, config: ProviderConfig, request: ImageRequest) -> ImageResponse:
        """Images made from a prompt (``/images/generations``)."""
        from provmw.providers import _openai_media  # loaded by the first media call
        return await _openai_media.generate_image(self, http, config, request)

    async def edit_image(self, http: HttpClient, config: ProviderConfig, request: ImageEditRequest) -> ImageResponse:
        """An image edited by a prompt (``/images/edits``, uploaded)."""
        from provmw.providers import _openai_media  # loaded by the first media call
        return await _openai_media.edit_image(self, http, config, request)

    async def transcribe(self, http: HttpClient, config: ProviderConfig,
                         request: TranscriptionRequest) -> TranscriptionResponse:
        """Audio's text (``/audio/transcriptions``, uploaded)."""
        from provmw.providers import _openai_media  # loaded by the first media call
        return await _openai_media.transcribe(self, http, config, request)

    async def speak(self, http: HttpClient, config: ProviderConfig, request: SpeechRequest) -> SpeechResponse:
        """Text spoken (``/audio/speech``): the audio's bytes."""
        from provmw.providers import _openai_media  # loaded by the first media call
        return await _openai_media.speak(self, http, config, request)

    def chat_body(self, config: ProviderConfig, request: ChatRequest) -> dict[str, Any]:
        """The JSON body of a chat completion, as the OpenAI API documents it."""
        body: dict[str, Any] = {"model": config.model, "messages": [_message(m) for m in request.messages]}
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
        options = merged_options(config, request.options)
        if not request.tools:
            options.pop("tool_choice", None)
        if request.response_schema is not None:
            options["response_format"] = _json_schema_format(request.response_schema)
        return _with_options(body, options)

    async def _post(self, http: HttpClient, config: ProviderConfig, path: str,
                    body: Mapping[str, Any]) -> tuple[Any, RateLimitHint | None]:
        """The decoded answer, and what its headers say of the rate limits."""
        with wire_errors(ERROR_CODES, provider=self.name, model=config.model):
            data, headers = await http.post_json_with_headers(_url(config, path), body, _headers(config))
        return data, openai_rate_limit(headers)

    async def _post_form(self, http: HttpClient, config: ProviderConfig, path: str, fields: Mapping[str, str],
                         files: Mapping[str, FormFile]) -> tuple[Any, RateLimitHint | None]:
        """As ``_post``, the body a multipart form (an upload)."""
        with wire_errors(ERROR_CODES, provider=self.name, model=config.model):
            data, headers = await http.post_form(_url(config, path), fields, files, _headers(config))
        return data, openai_rate_limit(headers)

    async def _post_bytes(self, http: HttpClient, config: ProviderConfig, path: str,
                          body: Mapping[str, Any]) -> tuple[bytes, str, RateLimitHint | None]:
        """As ``_post``, the answer's bytes and their content type (audio)."""
        with wire_errors(ERROR_CODES, provider=self.name, model=config.model):
            data, content_type, headers = await http.post_bytes(_url(config, path), body, _headers(config))
        return data, content_type, openai_rate_limit(headers)


def _json_schema_format(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Structured outputs, strict: the schema's title names it when it is a valid name."""
    title = schema.get("title")
    name = title if isinstance(title, str) and _SCHEMA_NAME.fullmatch(title) else "response"
    return {"type": "json_schema", "json_schema": {"name": name, "schema": plain_json(schema), "strict": True}}


def _rows(answer: Mapping[str, Any], inputs: int) -> list[Mapping[str, Any]]:
    """The embedding rows in input order: one per input, each index once."""
    data = serde.get(answer, "data", list, "response")
    rows = [serde.mapping(r, f"response.data[{i}]") for i, r in enumerate(data)]
    indexes = [serde.get(r, "index", int, f"response.data[{i}]") for i, r in enumerate(rows)]
    if sorted(indexes) != list(range(inputs)):
        raise InvalidDataError(f"response.data: indexes {sorted(indexes)[:10]} do not match {inputs} inputs")
    return [row for _, row in sorted(zip(indexes, rows, strict=True), key=lambda pair: pair[0])]


def _chunk(data: Mapping[str, Any], model: str, calls: ToolCallAssembler) -> ChatChunk:
    choices = serde.get(data, "choices", list, "event", default=None) or []
    usage = _usage(data, model) if data.get("usage") else None
    if not choices:
        return ChatChunk(usage=usage)
    choice = serde.mapping(choices[0], "event.choices[0]")
    delta = serde.get(choice, "delta", dict, "event.choices[0]", default=None) or {}
    pieces = serde.get(delta, "tool_calls", list, "event.choices[0].delta", default=None) or []
    for i, piece in enumerate(pieces):
        _tool_piece(calls, serde.mapping(piece, f"event.choices[0].delta.tool_calls[{i}]"), i)
    return ChatChunk(text=_text(delta, "content", "event.choices[0].delta"),
                     finish_reason=_finish_reason(choice, "event.choices[0]"), usage=usage)


def _tool_piece(calls: ToolCallAssembler, piece: Mapping[str, Any], position: int) -> None:
    where = f"event.choices[0].delta.tool_calls[{position}]"
    function = serde.get(piece, "function", dict, where, default=None) or {}
    calls.add(serde.get(piece, "index", int, where, default=position),
              id=serde.get(piece, "id", str, where, default=None),
              name=serde.get(function, "name", str, f"{where}.function", default=None),
              arguments=serde.get(function, "arguments", str, f"{where}.function", default=None) or "")
