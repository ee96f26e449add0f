"""The Gemini API adapter: ``generateContent``, ``streamGenerateContent``, ``embedContent`` and
``batchEmbedContents`` under ``https://generativelanguage.googleapis.com/v1beta``.

The key travels in the ``x-goog-api-key`` header, never in the URL.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote

from provmw import wire
from provmw.config import ProviderConfig
from provmw.errors import InvalidDataError, MalformedResponseError
from provmw.http import HttpClient, InBandError, decode_json, malformed
from provmw.messages import Message
from provmw.providers import Capabilities
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest
from provmw.responses import ChatChunk, CompletionResponse, EmbeddingResponse
from provmw_gemini.answer import Answer, finish_reason, read_answer, tool_calls, usage
from provmw_gemini.errors import gemini_errors
from provmw_gemini.request import chat_body

__all__ = ["DEFAULT_BASE_URL", "GeminiAdapter"]

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
# What a malformed answer raises while it is read; ``malformed`` turns each into one error.
_SHAPE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError)
_NUMBER_TYPES = frozenset({int, float})


def _headers(config: ProviderConfig) -> dict[str, str]:
    headers = {"Content-Type": "application/json", **config.headers}
    if config.api_key:
        headers["x-goog-api-key"] = config.api_key.reveal()
    return headers


def _model(config: ProviderConfig) -> str:
    return config.model.removeprefix("models/")


def _url(config: ProviderConfig, method: str) -> str:
    base = (config.base_url or DEFAULT_BASE_URL).rstrip("/")
    return f"{base}/models/{quote(_model(config), safe='')}:{method}"


def _response(config: ProviderConfig, answer: Answer) -> CompletionResponse:
    if answer.finish is None and not answer.text and not answer.calls:
        raise InvalidDataError("response: no candidate and no promptFeedback.blockReason")
    calls = tool_calls(answer)
    return CompletionResponse(
        provider="gemini", model=answer.model or config.model, usage=usage(answer.usage, config.model),
        served_by=config.identifier, text=answer.text, tool_calls=calls,
        finish_reason=finish_reason(answer.finish, bool(calls)))


def _vector(value: Any, where: str) -> tuple[float, ...]:
    """A vector of finite numbers; one pass over the types and one sum keep big vectors cheap."""
    vector = wire.get(wire.mapping(value, where), "values", list, where)
    if not vector or not {type(x) for x in vector} <= _NUMBER_TYPES or not math.isfinite(sum(vector)):
        raise InvalidDataError(f"{where}.values: expected finite numbers")
    return tuple(vector)


def _embed_body(text: str, dimensions: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"content": {"parts": [{"text": text}]}}
    if dimensions is not None:
        body["outputDimensionality"] = dimensions
    return body


def _vectors(data: Any, inputs: int) -> tuple[list[tuple[float, ...]], Any]:
    """The vectors of an ``embedContent`` (one input) or ``batchEmbedContents`` answer, and its usage."""
    body = wire.mapping(data, "response")
    if inputs == 1:
        return [_vector(wire.get(body, "embedding", dict, "response"), "response.embedding")], \
            body.get("usageMetadata")
    rows = wire.get(body, "embeddings", list, "response")
    if len(rows) != inputs:
        raise InvalidDataError(f"response.embeddings: {len(rows)} vectors for {inputs} inputs")
    return [_vector(row, f"response.embeddings[{i}]") for i, row in enumerate(rows)], body.get("usageMetadata")


class GeminiAdapter:
    """The native Gemini API wire format."""

    name = "gemini"
    api_key_env = "GEMINI_API_KEY"
    default_base_url = DEFAULT_BASE_URL
    capabilities = Capabilities(schema=True, response_format=True)

    async def chat(self, http: HttpClient, config: ProviderConfig, request: ChatRequest) -> CompletionResponse:
        data = await self._post(http, config, "generateContent", chat_body(config, request))
        try:
            return _response(config, read_answer(data, config.model))
        except _SHAPE_ERRORS as exc:
            raise malformed(self.name, config.model, exc) from None

    async def complete(self, http: HttpClient, config: ProviderConfig,
                       request: CompletionRequest) -> CompletionResponse:
        """A bare prompt sent as one user turn: Gemini has no completion API."""
        return await self.chat(http, config, ChatRequest((Message.user(request.prompt),), options=request.options))

    async def embed(self, http: HttpClient, config: ProviderConfig, request: EmbeddingRequest) -> EmbeddingResponse:
        """One input through ``embedContent``, several in one ``batchEmbedContents`` call."""
        bodies = [_embed_body(text, request.dimensions) for text in request.inputs]
        if len(bodies) == 1:
            data = await self._post(http, config, "embedContent", bodies[0])
        else:
            model = f"models/{_model(config)}"  # each request of a batch names the model of the path
            data = await self._post(http, config, "batchEmbedContents",
                                    {"requests": [{"model": model, **body} for body in bodies]})
        try:
            vectors, used = _vectors(data, len(bodies))
            return EmbeddingResponse(provider=self.name, model=config.model, served_by=config.identifier,
                                     usage=usage(used, config.model), vectors=vectors)
        except _SHAPE_ERRORS as exc:
            raise malformed(self.name, config.model, exc) from None

    async def stream_chat(self, http: HttpClient, config: ProviderConfig,
                          request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """Each event is a whole ``GenerateContentResponse`` holding the next piece; calls come
        whole. There is no end marker: the stream ends after the event with a finish reason."""
        events = http.post_sse(_url(config, "streamGenerateContent") + "?alt=sse", chat_body(config, request),
                               _headers(config))
        finish: str | None = None
        used: Any = None
        calls = 0
        with gemini_errors(config.model):
            async for event in events:
                answer = self._event(config, event.data)
                used = answer.usage if answer.usage is not None else used
                finish = answer.finish or finish
                if answer.text:
                    yield ChatChunk(text=answer.text)
                if answer.calls:
                    yield ChatChunk(tool_calls=tool_calls(answer, calls))
                    calls += len(answer.calls)
        if finish is None:
            raise MalformedResponseError("stream ended before an event with a finishReason", provider=self.name,
                                         model=config.model)
        yield ChatChunk(finish_reason=finish_reason(finish, calls > 0), usage=usage(used, config.model))

    def _event(self, config: ProviderConfig, data: str) -> Answer:
        try:
            decoded = decode_json(data)
            if isinstance(decoded, Mapping) and "error" in decoded:
                raise InBandError(data)
            return read_answer(decoded, config.model)
        except _SHAPE_ERRORS as exc:
            raise malformed(self.name, config.model, exc) from None

    async def _post(self, http: HttpClient, config: ProviderConfig, method: str, body: Mapping[str, Any]) -> Any:
        with gemini_errors(config.model):
            return await http.post_json(_url(config, method), body, _headers(config))
