"""The ``/rerank`` wire: Cohere's ``/v2/rerank``, and Jina's and Voyage's ``/v1/rerank``; rerank only.

All three take ``{model, query, documents, top_n}`` (Voyage names the last ``top_k``) and answer
each document's ``index`` and ``relevance_score`` (under ``results``; Voyage's under ``data``).
``base_url`` is the provider's root (``https://api.cohere.com``, to which ``/v2/rerank`` is
added) or ends in the API's version (``https://api.jina.ai/v1``, ``https://api.voyageai.com/v1``),
to which ``/rerank`` is added. Cohere bills search units (``meta.billed_units.search_units``),
Jina and Voyage tokens (``usage.total_tokens``, reported as input tokens); either count above the
request's worst case (``RerankRequest.most_units``, ``input_bytes``) is malformed. A provider's own
fields go in the ``extra_body`` option (``{"max_tokens_per_doc": 512}``); generation options
(``temperature``...) do not apply to rerank and are not sent.

Every field read from an answer is type-checked: a wrong type, an index outside the documents or
given twice, or a score that is not a number is a ``MalformedResponseError``, never an answer.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from provmw._base import serde
from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError, InvalidDataError, MalformedResponseError, UnsupportedOperationError
from provmw.http import COMMON_CODES, ErrorCodes, HttpClient, malformed, plain_json, wire_errors
from provmw.operations.rerank import RankedDocument, RerankRequest, RerankResponse
from provmw.providers import Capabilities
from provmw.providers._usage import UsageBody
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest, merged_options
from provmw.responses import ChatChunk, CompletionResponse, EmbeddingResponse, Usage

__all__ = ["CohereAdapter"]

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.cohere.com"
_VERSIONED = re.compile(r"/v\d+$")
# What a malformed answer raises while it is read; ``malformed`` turns each into one error.
# (A ConfigurationError is a value refused by the response's own validators: a negative index.)
_SHAPE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError, ConfigurationError)


def _extract_error(body: Any) -> tuple[str | None, str | None]:
    """Cohere answers ``{"message"}``, Jina and Voyage ``{"detail"}``; a gateway may answer OpenAI's shape."""
    error = body.get("error")
    if isinstance(error, Mapping):
        return error.get("code") or error.get("type"), error.get("message")
    message = body.get("message") or body.get("detail") or error
    return None, message if isinstance(message, str) else None


ERROR_CODES = ErrorCodes(extract=_extract_error, codes=COMMON_CODES,
                         not_found_hint="; base_url is the provider's root (/v2/rerank is added) or ends in /v1")


def _url(config: ProviderConfig) -> str:
    base = (config.base_url or DEFAULT_BASE_URL).rstrip("/")
    return f"{base}/rerank" if _VERSIONED.search(base) else f"{base}/v2/rerank"


def _headers(config: ProviderConfig) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json", **config.headers}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key.reveal()}"
    return headers


def _top_field(config: ProviderConfig) -> str:
    host = urlsplit(config.base_url or DEFAULT_BASE_URL).hostname or ""
    return "top_k" if host == "voyageai.com" or host.endswith(".voyageai.com") else "top_n"


def _body(config: ProviderConfig, request: RerankRequest) -> dict[str, Any]:
    options = merged_options(config, request.options)
    if ignored := sorted(set(options) - {"extra_body"}):
        log.debug("cohere ignores options %s: generation options do not apply to rerank", ignored)
    # The provider's own fields first: none of them replaces what the call was priced on.
    body: dict[str, Any] = plain_json(options.get("extra_body", {}))
    body.update(model=config.model, query=request.query, documents=list(request.documents))
    if request.top_n is not None:
        body[_top_field(config)] = request.top_n
    return body


def _results(answer: Mapping[str, Any], request: RerankRequest) -> tuple[RankedDocument, ...]:
    """Each document at most once, each index among the request's, at most ``top_n`` of them."""
    key = "results" if "results" in answer or "data" not in answer else "data"
    rows = serde.get(answer, key, list, "response")
    wanted = request.top_n or len(request.documents)
    if len(rows) > wanted:
        raise InvalidDataError(f"response.{key}: {len(rows)} results for {wanted} asked")
    results = [RankedDocument.from_dict(row, f"response.{key}[{i}]") for i, row in enumerate(rows)]
    indexes = [r.index for r in results]
    if any(i >= len(request.documents) for i in indexes):
        raise InvalidDataError(f"response.{key}: an index of {max(indexes)} for {len(request.documents)} documents")
    if len(set(indexes)) != len(indexes):
        raise InvalidDataError(f"response.{key}: an index appears more than once in {sorted(indexes)[:10]}")
    return tuple(results)


def _usage(answer: Mapping[str, Any], request: RerankRequest, provider: str, model: str) -> Usage:
    """What the answer says was billed, each count within the request's worst case (what a strict
    budget reserved): more is malformed, never a charge to book."""
    meta = serde.get(answer, "meta", dict, "response", default=None) or {}
    billed = UsageBody.of(meta.get("billed_units"), provider=provider, model=model, where="meta.billed_units")
    tokens = UsageBody.of(answer.get("usage"), provider=provider, model=model)
    most_units = request.most_units({})["search_unit"]
    units = _search_units(billed.body.get("search_units"), most_units, provider, model)
    input_tokens = tokens.count("total_tokens") or billed.count("input_tokens")
    if input_tokens > (most := request.input_bytes()):
        raise MalformedResponseError(f"the answer reports {input_tokens} input tokens, above the call's bound of "
                                     f"{most} (the query once per document, and the documents)",
                                     provider=provider, model=model)
    return Usage(input_tokens=input_tokens, units={"search_unit": units} if units is not None else {})


def _search_units(value: Any, most: float, provider: str, model: str) -> float | None:
    """Cohere's SDK reads a float: a whole number, written 1 or 1.0, from 0 to the call's worst case."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value != int(value) or not 0 <= value <= most:
        raise MalformedResponseError(f"meta.billed_units.search_units must be a whole number from 0 to {most:g} "
                                     f"(the call's worst case), got {value!r:.40}", provider=provider, model=model)
    return float(value)


class CohereAdapter:
    """The ``/rerank`` wire of Cohere (and of Jina and Voyage, through ``base_url``)."""

    name = "cohere"
    api_key_env = "CO_API_KEY"
    default_base_url: str | None = DEFAULT_BASE_URL
    capabilities = Capabilities(chat=False, completion=False, embeddings=False, streaming=False, tools=False,
                                vision=False, vision_url=False, vision_bytes=False, rerank=True)

    async def rerank(self, http: HttpClient, config: ProviderConfig, request: RerankRequest) -> RerankResponse:
        with wire_errors(ERROR_CODES, provider=self.name, model=config.model):
            data = await http.post_json(_url(config), _body(config, request), _headers(config))
        try:
            answer = serde.mapping(data, "response")
            return RerankResponse(
                provider=self.name, model=serde.get(answer, "model", str, "response", default=None) or config.model,
                usage=_usage(answer, request, self.name, config.model), served_by=config.identifier,
                response_id=serde.get(answer, "id", str, "response", default=None), results=_results(answer, request),
            )
        except _SHAPE_ERRORS as exc:
            raise malformed(self.name, config.model, exc) from None

    async def chat(self, http: HttpClient, config: ProviderConfig, request: ChatRequest) -> CompletionResponse:
        raise UnsupportedOperationError(self.name, "chat", configuration=config.identifier)

    async def complete(self, http: HttpClient, config: ProviderConfig,
                       request: CompletionRequest) -> CompletionResponse:
        raise UnsupportedOperationError(self.name, "completion", configuration=config.identifier)

    async def embed(self, http: HttpClient, config: ProviderConfig, request: EmbeddingRequest) -> EmbeddingResponse:
        raise UnsupportedOperationError(self.name, "embedding", configuration=config.identifier)

    async def stream_chat(self, http: HttpClient, config: ProviderConfig,
                          request: ChatRequest) -> AsyncIterator[ChatChunk]:
        raise UnsupportedOperationError(self.name, "chat", configuration=config.identifier)
        yield ChatChunk()  # pragma: no cover - makes this an async generator, as the protocol has it
