"""Broken copies of the adapters for the operations beyond chat (spot 8 of test_conformance_catches.py):
each is a real adapter with one method overridden to hold one realistic bug of units, rankings,
error statuses, extra_body or capabilities, for the conformance case that must catch it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import attrs

from provmw.config import ProviderConfig
from provmw.errors import ProviderError, ProviderUnavailableError, UnsupportedOperationError
from provmw.http import HttpClient
from provmw.operations.audio import TranscriptionRequest, TranscriptionResponse
from provmw.operations.images import ImageRequest, ImageResponse
from provmw.operations.moderation import ModerationRequest, ModerationResponse
from provmw.operations.rerank import RerankRequest, RerankResponse
from provmw.providers.cohere import CohereAdapter
from provmw.providers.openai import OpenAIAdapter

__all__ = ["CohereResultsInDocumentOrder", "CohereOneBasedIndex", "ModerationUndeclaredStillSent",
           "OpenAIImagesBilledAtStandard", "OpenAIModerationMergesExtraBody", "OpenAIUploadErrorsAsUnavailable",
           "OpenAIWithoutModeration"]


class OpenAIImagesBilledAtStandard(OpenAIAdapter):
    async def generate_image(self, http: HttpClient, config: ProviderConfig, request: ImageRequest) -> ImageResponse:
        response = await super().generate_image(http, config, request)
        units = {f"image:{request.size}:standard": len(response.images)}  # dall-e's default taken for every model's
        return attrs.evolve(response, usage=attrs.evolve(response.usage, units=units))


class CohereResultsInDocumentOrder(CohereAdapter):
    async def rerank(self, http: HttpClient, config: ProviderConfig, request: RerankRequest) -> RerankResponse:
        response = await super().rerank(http, config, request)  # each score taken for the document at its place
        return attrs.evolve(response, results=[attrs.evolve(r, index=i) for i, r in enumerate(response.results)])


class CohereOneBasedIndex(CohereAdapter):
    async def rerank(self, http: HttpClient, config: ProviderConfig, request: RerankRequest) -> RerankResponse:
        response = await super().rerank(http, config, request)  # the index read as 1-based, never checked
        return attrs.evolve(response, results=[attrs.evolve(r, index=r.index + 1) for r in response.results])


class OpenAIUploadErrorsAsUnavailable(OpenAIAdapter):
    async def transcribe(self, http: HttpClient, config: ProviderConfig,
                         request: TranscriptionRequest) -> TranscriptionResponse:
        try:
            return await super().transcribe(http, config, request)
        except ProviderError as error:  # the status ignored: every failed upload taken for the server's
            raise ProviderUnavailableError(str(error), provider=self.name, status=error.status) from None


class BodyMerged:
    """An ``HttpClient`` whose JSON bodies get ``extra`` over them: the merge of the copy below."""

    def __init__(self, http: HttpClient, extra: Mapping[str, Any]) -> None:
        self._http, self._extra = http, extra

    async def post_json_with_headers(self, url: str, body: Mapping[str, Any],
                                     headers: Mapping[str, str]) -> tuple[Any, Mapping[str, str]]:
        return await self._http.post_json_with_headers(url, {**body, **self._extra}, headers)


class OpenAIModerationMergesExtraBody(OpenAIAdapter):
    async def moderate(self, http: HttpClient, config: ProviderConfig,
                       request: ModerationRequest) -> ModerationResponse:
        merged = BodyMerged(http, request.options.get("extra_body") or {})
        return await super().moderate(cast(HttpClient, merged), config, attrs.evolve(request, options={}))


class OpenAIWithoutModeration(OpenAIAdapter):
    """Sound: it declares no moderation and refuses it, as Azure's does."""

    capabilities = attrs.evolve(OpenAIAdapter.capabilities, moderation=False)

    async def moderate(self, http: HttpClient, config: ProviderConfig,
                       request: ModerationRequest) -> ModerationResponse:
        raise UnsupportedOperationError(self.name, "moderation", configuration=config.identifier)


class ModerationUndeclaredStillSent(OpenAIAdapter):
    capabilities = attrs.evolve(OpenAIAdapter.capabilities, moderation=False)  # the method inherited, unguarded
