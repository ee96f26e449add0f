"""The Bedrock Runtime adapter: Converse for chat, ConverseStream for streams; no embeddings.

A configuration with ``api_key`` sends it as a Bedrock API key (``Authorization: Bearer``);
one without is signed with AWS SigV4 from botocore's credential chain (``signing``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING
from urllib.parse import quote

from provmw import wire
from provmw.config import ProviderConfig
from provmw.errors import (
    MalformedResponseError,
    ProviderTimeoutError,
    ResponseTooLargeError,
    UnsupportedOperationError,
)
from provmw.http import HttpClient, ReadLimits, decode_json, malformed, wire_errors
from provmw.messages import Message
from provmw.providers import Capabilities
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest
from provmw.responses import ChatChunk, CompletionResponse, EmbeddingResponse
from provmw.scrubbing import Scrubber
from provmw_bedrock import answers
from provmw_bedrock.converse import request_body
from provmw_bedrock.errors import ERROR_CODES, error_type_header, in_band_error
from provmw_bedrock.eventstream import EventMessage, EventStreamDecoder, EventStreamError, EventTooLargeError
from provmw_bedrock.signing import AwsAuth, sent_secrets, sign

if TYPE_CHECKING:
    from botocore.session import Session
    from yarl import URL

__all__ = ["EVENT_STREAM", "BedrockAdapter"]

EVENT_STREAM = "application/vnd.amazon.eventstream"
# What a malformed answer raises while it is read; ``malformed`` turns each into one error.
_SHAPE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError)


class BedrockAdapter:
    """The Bedrock Runtime Converse wire format, signed with SigV4 or sent with a Bedrock API key."""

    name = "bedrock"
    api_key_env = "AWS_BEARER_TOKEN_BEDROCK"  # what AWS's own SDKs read a Bedrock API key from
    ambient_credentials = True  # a configuration without a key is signed from AWS's credential chain
    capabilities = Capabilities(embeddings=False, schema=True)

    def __init__(self, *, session: Callable[[], Session] | None = None) -> None:
        """``session`` makes the botocore session a configuration's region and credentials come
        from (default: a new ``botocore.session.Session()``, the standard chain)."""
        self._auth = AwsAuth(session)

    async def chat(self, http: HttpClient, config: ProviderConfig, request: ChatRequest) -> CompletionResponse:
        with wire_errors(ERROR_CODES, provider=self.name, model=config.model), error_type_header():
            url, body, headers, sent = await self._request(config, request, "converse", "application/json")
        # ``sent`` innermost: an echoed credential is masked before an error body is cut or re-wrapped.
        with wire_errors(ERROR_CODES, provider=self.name, model=config.model), error_type_header(), sent:
            data = await http.post_json(url, body, headers)
        try:
            text, calls, reason, usage = answers.answer(data, config.model)
        except _SHAPE_ERRORS as exc:
            raise malformed(self.name, config.model, exc) from None
        return CompletionResponse(provider=self.name, model=config.model, usage=usage, served_by=config.identifier,
                                  text=text, tool_calls=calls, finish_reason=reason)

    async def complete(self, http: HttpClient, config: ProviderConfig,
                       request: CompletionRequest) -> CompletionResponse:
        """A bare prompt sent as one user turn: Bedrock has no completion API of its own."""
        chat = ChatRequest(messages=(Message.user(request.prompt),), options=request.options)
        return await self.chat(http, config, chat)

    async def embed(self, http: HttpClient, config: ProviderConfig,
                    request: EmbeddingRequest) -> EmbeddingResponse:
        raise UnsupportedOperationError(self.name, "embedding")

    async def stream_chat(self, http: HttpClient, config: ProviderConfig,
                          request: ChatRequest) -> AsyncIterator[ChatChunk]:
        reader = answers.StreamReader(config.model)
        with wire_errors(ERROR_CODES, provider=self.name, model=config.model), error_type_header():
            url, body, headers, sent = await self._request(config, request, "converse-stream", EVENT_STREAM)
        with wire_errors(ERROR_CODES, provider=self.name, model=config.model), error_type_header(), sent:
            chunks = http.post_stream(url, body, headers)
            async for message in self._messages(chunks, http.limits, config.model):
                chunk = self._read(reader, message, config.model)
                if chunk is not None:
                    yield chunk
                if reader.done:
                    return
        raise MalformedResponseError("stream ended before its messageStop and metadata events",
                                     provider=self.name, model=config.model)

    async def _request(self, config: ProviderConfig, request: ChatRequest, operation: str,
                       accept: str) -> tuple[URL, bytes, dict[str, str], Scrubber]:
        """The URL, body and headers of a call, signed unless the configuration has a key, and
        the scrubber of the credentials they carry."""
        bearer = config.api_key.reveal() if config.api_key else None
        account = await self._auth.account(config, signed=bearer is None)
        # The model id is one path segment (an ARN's ":" and "/" escaped), sent as it was signed.
        url = f"{account.endpoint}/model/{quote(config.model, safe='-_.~')}/{operation}"
        body = json.dumps(request_body(config, request), separators=(",", ":"), allow_nan=False).encode()
        headers = {"Content-Type": "application/json", "Accept": accept, **config.headers}
        if bearer is not None:
            headers["Authorization"] = f"Bearer {bearer}"
            sent: tuple[str, ...] = (bearer,)
        else:
            credentials = await account.frozen_credentials(self.name, config.model)
            headers = sign(credentials, account.region, url, body, headers)
            sent = sent_secrets(credentials, headers)
        from yarl import URL  # aiohttp's: imported with the first request, not with the plugin

        return URL(url, encoded=True), body, headers, Scrubber.of((*sent, *config.headers.values()))

    async def _messages(self, chunks: AsyncGenerator[bytes, None], limits: ReadLimits,
                        model: str) -> AsyncIterator[EventMessage]:
        """The stream's messages; a message slower than ``stream_idle_s`` to arrive ends it."""
        decoder = EventStreamDecoder(limits.max_event_bytes)
        loop = asyncio.get_running_loop()
        try:
            while True:
                timer = asyncio.timeout_at(loop.time() + limits.stream_idle_s)
                try:
                    async with timer:
                        messages = await self._next_messages(chunks, decoder, model)
                except TimeoutError:
                    if timer.expired():
                        raise ProviderTimeoutError(f"stream sent no event for {limits.stream_idle_s:g}s "
                                                   "([http] stream_idle_s)", provider=self.name, model=model) from None
                    raise
                if messages is None:
                    return
                for message in messages:
                    yield message
        finally:
            await chunks.aclose()

    async def _next_messages(self, chunks: AsyncGenerator[bytes, None], decoder: EventStreamDecoder,
                             model: str) -> list[EventMessage] | None:
        """The messages the next reads complete (at least one), or None at the end of the stream."""
        while (chunk := await anext(chunks, None)) is not None:
            try:
                if messages := decoder.feed(chunk):
                    return messages
            except EventTooLargeError as exc:
                raise ResponseTooLargeError(str(exc), limit_bytes=exc.limit_bytes, provider=self.name,
                                            model=model) from None
            except EventStreamError as exc:
                raise MalformedResponseError(str(exc), provider=self.name, model=model) from None
        if decoder.pending:
            raise MalformedResponseError(f"stream ended inside a message ({decoder.pending} bytes of it)",
                                         provider=self.name, model=model)
        return None

    def _read(self, reader: answers.StreamReader, message: EventMessage, model: str) -> ChatChunk | None:
        kind = message.header(":message-type")
        if kind == "exception":
            raise in_band_error(message.header(":exception-type"), message.payload)
        if kind == "error":
            raise in_band_error(message.header(":error-code"),
                                json.dumps({"message": message.header(":error-message")}).encode())
        try:
            if kind != "event":
                raise ValueError(f"unknown :message-type {kind!r}")
            return reader.read(message.header(":event-type"), wire.mapping(decode_json(message.payload), "event"))
        except _SHAPE_ERRORS as exc:
            raise malformed(self.name, model, exc) from None
