"""The Bedrock Runtime adapter: Converse for chat, ConverseStream for streams, Agent Runtime's Rerank; no embeddings.

A configuration with ``api_key`` sends it as a Bedrock API key (``Authorization: Bearer``);
one without is signed with AWS SigV4 from botocore's credential chain (``signing``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from provmw import wire
from provmw.config import ProviderConfig
from provmw.errors import (
    ConfigurationError,
    MalformedResponseError,
    ProviderTimeoutError,
    ResponseTooLargeError,
    UnsupportedOperationError,
)
from provmw.http import HttpClient, ReadLimits, decode_json, malformed, wire_errors
from provmw.messages import Message
from provmw.operations.rerank import RerankRequest, RerankResponse
from provmw.providers import Capabilities
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest
from provmw.responses import ChatChunk, CompletionResponse, EmbeddingResponse
from provmw.scrubbing import Scrubber
from provmw_bedrock import answers, rerank
from provmw_bedrock.converse import request_body
from provmw_bedrock.errors import ERROR_CODES, error_type_header, in_band_error
from provmw_bedrock.eventstream import EventMessage, EventStreamDecoder, EventStreamError, EventTooLargeError
from provmw_bedrock.signing import Account, AwsAuth, sent_secrets, sign

if TYPE_CHECKING:
    from botocore.session import Session
    from yarl import URL

__all__ = ["EVENT_STREAM", "BedrockAdapter"]

EVENT_STREAM = "application/vnd.amazon.eventstream"
# What a malformed answer raises while it is read; ``malformed`` turns each into one error.
_SHAPE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError)
# And a rerank answer's value its response class refuses (a negative index) is malformed too.
_RANKED_ERRORS = (*_SHAPE_ERRORS, ConfigurationError)


class BedrockAdapter:
    """The Bedrock Runtime Converse wire format, signed with SigV4 or sent with a Bedrock API key."""

    name = "bedrock"
    api_key_env = "AWS_BEARER_TOKEN_BEDROCK"  # what AWS's own SDKs read a Bedrock API key from
    ambient_credentials = True  # a configuration without a key is signed from AWS's credential chain
    capabilities = Capabilities(embeddings=False, schema=True, rerank=True)

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

    async def rerank(self, http: HttpClient, config: ProviderConfig, request: RerankRequest) -> RerankResponse:
        """Bedrock Agent Runtime's Rerank (``provmw_bedrock.rerank`` says how it is sent and billed)."""
        with wire_errors(ERROR_CODES, provider=self.name, model=config.model), error_type_header():
            account = await self._auth.account(config, signed=config.api_key is None)
            url = rerank.rerank_url(config, account.region)
            sent_url, body, headers, sent = await self._signed(
                config, account, url, rerank.rerank_body(config, request, account.region), "application/json")
        with wire_errors(ERROR_CODES, provider=self.name, model=config.model), error_type_header(), sent:
            data = await http.post_json(sent_url, body, headers)
        try:
            results = rerank.rerank_results(wire.mapping(data, "response"), request)
        except _RANKED_ERRORS as exc:
            raise malformed(self.name, config.model, exc) from None
        return RerankResponse(provider=self.name, model=config.model, usage=rerank.rerank_usage(request),
                              served_by=config.identifier, results=results)

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
        """The URL, body and headers of a Converse call, signed unless the configuration has a key,
        and the scrubber of the credentials they carry."""
        account = await self._auth.account(config, signed=config.api_key is None)
        # The model id is one path segment (an ARN's ":" and "/" escaped), sent as it was signed.
        url = f"{account.endpoint}/model/{quote(config.model, safe='-_.~')}/{operation}"
        return await self._signed(config, account, url, request_body(config, request), accept)

    async def _signed(self, config: ProviderConfig, account: Account, url: str, payload: dict[str, Any],
                      accept: str) -> tuple[URL, bytes, dict[str, str], Scrubber]:
        """``payload`` to ``url`` as sent: its bytes, its headers with a bearer key or a SigV4
        signature, and the scrubber of the credentials they carry."""
        bearer = config.api_key.reveal() if config.api_key else None
        body = json.dumps(payload, separators=(",", ":"), allow_nan=False).encode()
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
