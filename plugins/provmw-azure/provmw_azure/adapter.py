"""The Azure OpenAI adapter: the OpenAI adapter's bodies, answers and streams, sent to a deployment.

Each call is handed to ``OpenAIAdapter`` with two things changed: the configuration, whose
``base_url`` becomes the deployment's URL and whose credentials become Azure's (the
``api-key`` header, or an Entra ID bearer token), and the HTTP client, wrapped in an
``AzureTransport`` that adds the ``api-version`` query and reads Azure's content filters and
error bodies. Everything else (message and tool mapping, usage, streamed tool calls, error
classes) is the OpenAI adapter's, so the two cannot drift apart.

Images (made and edited), transcription and speech go to the deployment's own routes
(``/images/generations``, ``/images/edits``, ``/audio/transcriptions``, ``/audio/speech``)
the same way. Moderation does not: Azure OpenAI has no moderation endpoint (its content
filter runs inside every deployment), so ``moderate`` is refused before any request.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

import attrs

from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError, UnsupportedOperationError
from provmw.http import HttpClient
from provmw.providers import Capabilities
from provmw.providers.openai import OpenAIAdapter
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest
from provmw.responses import ChatChunk, CompletionResponse, EmbeddingResponse, ProviderResponse
from provmw_azure._deployment import Deployment
from provmw_azure._transport import AzureTransport
from provmw_azure.tokens import TokenCache, TokenProvider

if TYPE_CHECKING:
    from provmw.operations.audio import SpeechRequest, SpeechResponse, TranscriptionRequest, TranscriptionResponse
    from provmw.operations.images import ImageEditRequest, ImageRequest, ImageResponse
    from provmw.operations.moderation import ModerationRequest, ModerationResponse
    from provmw.operations.responses_api import ResponsesRequest, ResponsesResponse

__all__ = ["AzureOpenAIAdapter"]

_AUTH_HEADERS = frozenset({"api-key", "authorization"})
R = TypeVar("R", bound=ProviderResponse)


class AzureOpenAIAdapter(OpenAIAdapter):
    """Azure OpenAI deployments; ``token_provider`` serves configurations without an API key."""

    name = "azure"
    api_key_env = "AZURE_OPENAI_API_KEY"
    default_base_url = None  # every deployment's endpoint is the operator's: none is Azure's own
    # Azure OpenAI serves no /moderations: its content filter is built into each deployment.
    capabilities: Capabilities = attrs.evolve(OpenAIAdapter.capabilities, moderation=False)

    def __init__(self, token_provider: TokenProvider | None = None, *,
                 clock: Callable[[], float] = time.time, refresh_margin_s: float = 300.0) -> None:
        self._tokens = None if token_provider is None else \
            TokenCache(token_provider, clock=clock, refresh_margin_s=refresh_margin_s)

    @property
    def ambient_credentials(self) -> bool:
        """Whether a configuration without a key is sent with a token of the adapter's own (Entra ID)."""
        return self._tokens is not None

    async def chat(self, http: HttpClient, config: ProviderConfig, request: ChatRequest) -> CompletionResponse:
        transport, routed = await self._route(http, config)
        with transport.scrubber:
            return await super().chat(transport, routed, request)

    async def complete(self, http: HttpClient, config: ProviderConfig,
                       request: CompletionRequest) -> CompletionResponse:
        transport, routed = await self._route(http, config)
        with transport.scrubber:
            return await super().complete(transport, routed, request)

    async def embed(self, http: HttpClient, config: ProviderConfig, request: EmbeddingRequest) -> EmbeddingResponse:
        transport, routed = await self._route(http, config)
        with transport.scrubber:
            return await super().embed(transport, routed, request)

    async def stream_chat(self, http: HttpClient, config: ProviderConfig,
                          request: ChatRequest) -> AsyncIterator[ChatChunk]:
        transport, routed = await self._route(http, config)
        with transport.scrubber:
            async for chunk in super().stream_chat(transport, routed, request):
                yield chunk

    async def respond(self, http: HttpClient, config: ProviderConfig, request: ResponsesRequest) -> ResponsesResponse:
        """The Responses API on Azure's v1 route, the deployment named in the body."""
        transport, routed = await self._route(http, config, v1=True)
        with transport.scrubber:
            return await super().respond(transport, routed, request)

    async def stream_respond(self, http: HttpClient, config: ProviderConfig,
                             request: ResponsesRequest) -> AsyncIterator[ChatChunk]:
        transport, routed = await self._route(http, config, v1=True)
        with transport.scrubber:
            async for chunk in super().stream_respond(transport, routed, request):
                yield chunk

    async def generate_image(self, http: HttpClient, config: ProviderConfig, request: ImageRequest) -> ImageResponse:
        """Images made on the deployment (``/images/generations``)."""
        transport, routed = await self._route(http, config)
        with transport.scrubber:
            return await super().generate_image(transport, routed, request)

    async def edit_image(self, http: HttpClient, config: ProviderConfig, request: ImageEditRequest) -> ImageResponse:
        """An image edited on the deployment (``/images/edits``, uploaded)."""
        transport, routed = await self._route(http, config)
        with transport.scrubber:
            return await super().edit_image(transport, routed, request)

    async def transcribe(self, http: HttpClient, config: ProviderConfig,
                         request: TranscriptionRequest) -> TranscriptionResponse:
        """Audio's text from the deployment (``/audio/transcriptions``, uploaded)."""
        transport, routed = await self._route(http, config)
        with transport.scrubber:
            return await super().transcribe(transport, routed, request)

    async def speak(self, http: HttpClient, config: ProviderConfig, request: SpeechRequest) -> SpeechResponse:
        """Text spoken by the deployment (``/audio/speech``): the audio's bytes."""
        transport, routed = await self._route(http, config)
        with transport.scrubber:
            return await super().speak(transport, routed, request)

    async def moderate(self, http: HttpClient, config: ProviderConfig,
                       request: ModerationRequest) -> ModerationResponse:
        """Refused before any request: Azure OpenAI has no moderation endpoint."""
        raise UnsupportedOperationError(self.name, "moderation", configuration=config.identifier)

    async def _route(self, http: HttpClient, config: ProviderConfig, *,
                     v1: bool = False) -> tuple[AzureTransport, ProviderConfig]:
        """The client and configuration the OpenAI adapter is handed for one call on ``config`` (on the
        v1 routes: the deployment as the model); every error of the call is scrubbed of what it carried
        (a token the manager never saw)."""
        deployment = Deployment.of(config)
        headers, token = await self._credentials(config)
        transport = AzureTransport(http, deployment, provider=self.name, model=config.model, versioned=not v1,
                                   secrets=(*(() if token is None else (token,)), *headers.values()))
        # The OpenAI adapter sends a configuration's key as a bearer token: just what Entra ID takes.
        routed = attrs.evolve(config, base_url=deployment.v1_url if v1 else deployment.base_url, api_key=token,
                              headers=headers)
        return transport, attrs.evolve(routed, model=deployment.name) if v1 else routed

    async def _credentials(self, config: ProviderConfig) -> tuple[Mapping[str, str], str | None]:
        """The headers of a call on ``config`` (the ``api-key`` one with its key), else an Entra ID token."""
        if config.api_key:
            return {**config.headers, "api-key": config.api_key.reveal()}, None
        if self._tokens is not None:
            return config.headers, (await self._tokens.token()).token
        if _AUTH_HEADERS.isdisjoint(h.lower() for h in config.headers):
            raise ConfigurationError(
                f"configuration {config.identifier!r}: the azure provider needs an API key (api_key_env = "
                f"\"{self.api_key_env}\") or an Entra ID token provider (provmw_azure.tokens)")
        return config.headers, None
