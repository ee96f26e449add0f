"""Provider adapters: the typed boundary between provmw and one wire API each.

An adapter is stateless: it receives the manager's ``HttpClient``, the configuration
the pipeline chose, and a typed request; it returns a typed response or raises an error
from the ``ProviderError`` tree. Adapters never retry and never log secrets.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from provmw.config import ProviderConfig
    from provmw.http import HttpClient
    from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest
    from provmw.responses import ChatChunk, CompletionResponse, EmbeddingResponse

__all__ = ["ProviderAdapter"]


class ProviderAdapter(Protocol):
    """What a provider plugin implements; ``name`` is what configurations put in ``provider``."""

    name: str

    async def chat(self, http: HttpClient, config: ProviderConfig,
                   request: ChatRequest) -> CompletionResponse:
        """Answer a conversation; images and tools travel in the request."""
        ...

    async def complete(self, http: HttpClient, config: ProviderConfig,
                       request: CompletionRequest) -> CompletionResponse:
        """Complete a bare prompt."""
        ...

    async def embed(self, http: HttpClient, config: ProviderConfig,
                    request: EmbeddingRequest) -> EmbeddingResponse:
        """Embed each input, in order."""
        ...

    def stream_chat(self, http: HttpClient, config: ProviderConfig,
                    request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """Stream the answer to a conversation as chunks; the last carries finish reason and usage."""
        ...
