"""Bedrock's Rerank API (Agents for Amazon Bedrock Runtime, ``POST /rerank``): its body, endpoint and answer.

Rerank lives on another endpoint than Converse: ``bedrock-agent-runtime.{region}.amazonaws.com``,
signed with the same signing name (``bedrock``). A configuration's ``base_url`` naming the public
Bedrock Runtime endpoint is turned into its region's Agent Runtime endpoint; any other
``base_url`` (an Agent Runtime or VPC endpoint of its own, a proxy) is used as it is. The model is
sent as a foundation-model ARN (``arn:aws:bedrock:{region}::foundation-model/{model}``) unless the
configuration names an ARN itself.

The answer holds each result's ``index`` and ``relevanceScore``, and no usage: Bedrock bills a
query per 100 documents (Cohere Rerank 3.5 and Amazon Rerank 1.0, on its pricing page; a long
document as several), booked as the request's worst case in ``search_unit``s. An answer with an
index outside the documents or given twice, a score that is not a finite number, or more results
than asked is malformed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from provmw import wire as serde
from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError, InvalidDataError, InvalidRequestError
from provmw.operations.rerank import RankedDocument, RerankRequest
from provmw.requests import merged_options
from provmw.responses import Usage
from provmw.wire import with_extra_body

__all__ = ["DOCUMENTS_PER_QUERY", "MAX_SOURCES", "model_arn", "rerank_body", "rerank_results", "rerank_url",
           "rerank_usage"]

log = logging.getLogger(__name__)

# Bedrock bills one query per this many documents (a search unit in provmw's words).
DOCUMENTS_PER_QUERY = 100
# The API's own limit on sources (RerankSourcesList's max): more is refused before sending.
MAX_SOURCES = 1000
# The public Bedrock Runtime host, whose region's Agent Runtime host serves Rerank.
_RUNTIME_HOST = re.compile(r"^bedrock-runtime(-fips)?(\.[a-z]{2}(?:-[a-z]+)+-\d+\.amazonaws\.com(?:\.cn)?)$",
                           re.IGNORECASE)


def rerank_url(config: ProviderConfig, region: str) -> str:
    """Where ``config``'s Rerank calls go: its region's Agent Runtime endpoint, or its own ``base_url``."""
    if config.base_url is None:
        return f"https://bedrock-agent-runtime.{region}.{_dns_suffix(region)}/rerank"
    parts = urlsplit(config.base_url.rstrip("/"))
    host = parts.hostname or ""
    if (public := _RUNTIME_HOST.match(host)) is not None:
        parts = parts._replace(netloc=f"bedrock-agent-runtime{public.group(1) or ''}{public.group(2)}")
    elif ".bedrock-runtime." in f".{host.lower()}":
        raise ConfigurationError(
            f"configuration {config.identifier!r}: rerank is served by Bedrock's Agent Runtime, not by the Bedrock "
            f"Runtime endpoint {host!r}: give base_url the Agent Runtime endpoint (or its VPC endpoint)")
    return f"{urlunsplit(parts)}/rerank"


def _dns_suffix(region: str) -> str:
    return "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"


def model_arn(config: ProviderConfig, region: str) -> str:
    """The ARN Rerank names its model by: the configuration's own ARN, else its region's foundation model."""
    if config.model.startswith("arn:"):
        return config.model
    if not region:
        raise ConfigurationError(
            f"configuration {config.identifier!r}: rerank names its model by an ARN, which needs a region: give "
            "model as arn:aws:bedrock:REGION::foundation-model/ID, or a base_url naming the region")
    partition = "aws-cn" if region.startswith("cn-") else "aws-us-gov" if region.startswith("us-gov-") else "aws"
    return f"arn:{partition}:bedrock:{region}::foundation-model/{config.model}"


def rerank_body(config: ProviderConfig, request: RerankRequest, region: str) -> dict[str, Any]:
    """The Rerank request: one text query, the documents inline, ``top_n`` as ``numberOfResults``."""
    if len(request.documents) > MAX_SOURCES:
        raise InvalidRequestError(f"Bedrock reranks at most {MAX_SOURCES} documents a call, got "
                                  f"{len(request.documents)}", provider="bedrock", model=config.model)
    options = merged_options(config, request.options)
    if ignored := sorted(set(options) - {"extra_body"}):
        log.debug("bedrock rerank ignores options %s: generation options do not apply to rerank", ignored)
    ranking: dict[str, Any] = {"modelConfiguration": {"modelArn": model_arn(config, region)}}
    if request.top_n is not None:
        ranking["numberOfResults"] = request.top_n
    body = {
        "queries": [{"type": "TEXT", "textQuery": {"text": request.query}}],
        "sources": [{"type": "INLINE", "inlineDocumentSource": {"type": "TEXT", "textDocument": {"text": text}}}
                    for text in request.documents],
        "rerankingConfiguration": {"type": "BEDROCK_RERANKING_MODEL", "bedrockRerankingConfiguration": ranking},
    }
    return with_extra_body(body, options)


def rerank_results(answer: Mapping[str, Any], request: RerankRequest) -> tuple[RankedDocument, ...]:
    """Each result's document and score: each index among the request's and given once, at most
    ``top_n`` of them (all the documents when None)."""
    rows = serde.get(answer, "results", list, "response")
    wanted = request.top_n or len(request.documents)
    if len(rows) > wanted:
        raise InvalidDataError(f"response.results: {len(rows)} results for {wanted} asked")
    results = [_result(row, f"response.results[{i}]", len(request.documents)) for i, row in enumerate(rows)]
    indexes = [r.index for r in results]
    if len(set(indexes)) != len(indexes):
        raise InvalidDataError(f"response.results: an index appears more than once in {sorted(indexes)[:10]}")
    if serde.get(answer, "nextToken", str, "response", default=None):
        # One request is one ledger row: a next page would be a second, unpriced request.
        log.warning("bedrock rerank: the answer has a next page of results, which is not fetched")
    return tuple(results)


def _result(value: object, where: str, documents: int) -> RankedDocument:
    row = serde.mapping(value, where)
    index = serde.get(row, "index", int, where)
    if not 0 <= index < documents:
        raise InvalidDataError(f"{where}.index: {index} for {documents} documents")
    return RankedDocument(index=index, relevance_score=serde.finite(row.get("relevanceScore"),
                                                                    f"{where}.relevanceScore"))


def rerank_usage(request: RerankRequest) -> Usage:
    """What the call is billed: a query (``search_unit``) per 100 documents, a long document counted once
    per chunk it is split into. The answer reports none, so the request's own worst case is booked (never
    less than the bill: ``RerankRequest.most_units``)."""
    return Usage(units=dict(request.most_units({})))
