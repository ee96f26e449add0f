"""A third-party adapter as a plugin package would write it: the OpenAI chat wire, named "acme".

It imports public provmw modules only (``test_conformance`` parses it to check) and offers
chat and streaming; completion and embeddings raise ``UnsupportedOperationError``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from provmw.config import ProviderConfig
from provmw.errors import MalformedResponseError, UnsupportedOperationError
from provmw.http import ErrorCodes, HttpClient, malformed, plain_json, wire_errors
from provmw.messages import Message, TextPart, ToolCall
from provmw.providers import Capabilities
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest, merged_options
from provmw.responses import ChatChunk, CompletionResponse, EmbeddingResponse, Usage

__all__ = ["AcmeAdapter"]

ERROR_CODES = ErrorCodes(extract=lambda body: (body["error"].get("code"), body["error"].get("message")))


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
    content = [{"type": "text", "text": p.text} if isinstance(p, TextPart)
               else {"type": "image_url", "image_url": {"url": p.data_url}} for p in message.content]
    calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
             for c in message.tool_calls]
    return {"role": message.role, "content": content, **({"tool_calls": calls} if calls else {})}


def _body(config: ProviderConfig, request: ChatRequest) -> dict[str, Any]:
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                               "parameters": plain_json(t.parameters)}} for t in request.tools]
    body = {"model": config.model, "messages": [_message(m) for m in request.messages],
            **({"tools": tools} if tools else {})}
    return {**body, **plain_json(merged_options(config, request.options))}


def _usage(data: Mapping[str, Any]) -> Usage:
    usage = data.get("usage") or {}
    return Usage(input_tokens=usage.get("prompt_tokens", 0), output_tokens=usage.get("completion_tokens", 0))


def _headers(config: ProviderConfig) -> dict[str, str]:
    key = config.api_key.reveal() if config.api_key else ""
    return {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}


class AcmeAdapter:
    """Acme's chat API, which speaks the OpenAI wire format."""

    name = "acme"
    capabilities = Capabilities(completion=False, embeddings=False)

    async def chat(self, http: HttpClient, config: ProviderConfig, request: ChatRequest) -> CompletionResponse:
        with wire_errors(ERROR_CODES, provider=self.name, model=config.model):
            data = await http.post_json(f"{config.base_url}/chat/completions", _body(config, request),
                                        _headers(config))
        try:
            choice = data["choices"][0]
            calls = tuple(ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
                          for c in choice["message"].get("tool_calls") or ())
            return CompletionResponse(provider=self.name, model=config.model, usage=_usage(data),
                                      served_by=config.identifier, text=choice["message"]["content"] or "",
                                      tool_calls=calls, finish_reason=choice["finish_reason"])
        except (KeyError, IndexError, TypeError) as exc:
            raise malformed(self.name, config.model, exc) from None

    async def complete(self, http: HttpClient, config: ProviderConfig,
                       request: CompletionRequest) -> CompletionResponse:
        raise UnsupportedOperationError(self.name, "completion")

    async def embed(self, http: HttpClient, config: ProviderConfig, request: EmbeddingRequest) -> EmbeddingResponse:
        raise UnsupportedOperationError(self.name, "embedding")

    async def stream_chat(self, http: HttpClient, config: ProviderConfig,
                          request: ChatRequest) -> AsyncIterator[ChatChunk]:
        body = {**_body(config, request), "stream": True, "stream_options": {"include_usage": True}}
        events = http.post_sse(f"{config.base_url}/chat/completions", body, _headers(config),
                               read_timeout_s=config.timeout_s)
        finish, usage = None, None
        with wire_errors(ERROR_CODES, provider=self.name, model=config.model):
            async for event in events:
                if event.data == "[DONE]":
                    yield ChatChunk(finish_reason=finish, usage=usage)
                    return
                try:
                    data = json.loads(event.data)
                    choice = data["choices"][0] if data["choices"] else {}
                except (ValueError, KeyError, TypeError) as exc:
                    raise malformed(self.name, config.model, exc) from None
                finish = choice.get("finish_reason") or finish
                usage = _usage(data) if data.get("usage") else usage
                if text := choice.get("delta", {}).get("content"):
                    yield ChatChunk(text=text)
        raise MalformedResponseError("stream ended before [DONE]", provider=self.name, model=config.model)
