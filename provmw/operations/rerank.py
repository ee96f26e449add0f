"""Rerank: documents ordered by their relevance to a query (the Cohere, Jina and Voyage ``/rerank`` wire).

A call is billed in search units where the provider counts them (Cohere), else in input
tokens (Jina, Voyage). Cohere's rule, from its pricing page: a search unit is one query with
up to 100 documents, and a document longer than 500 tokens, the query's included, is split
into chunks that each count as a document. The worst case bounds tokens by UTF-8 bytes (a
byte-level tokenizer emits at least a byte a token), so a document counts as at most
``ceil(document bytes / (500 - query bytes))`` chunks, every byte a chunk once the query
alone fills 500 bytes: far above what is billed for prose, never below it.

Jina and Voyage bill tokens, a cross-encoder's: each document is read with the query, so Voyage
bills "query tokens x number of documents + document tokens" (its API reference), and Jina
likewise per pair. The input bound is that rule in bytes, with a few tokens a pair for the
separators a cross-encoder adds (:data:`PAIR_TOKENS`); an answer reporting more is malformed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from provmw._base import serde
from provmw._base.strict_json import plain_json
from provmw.context import FrozenMap
from provmw.errors import ConfigurationError
from provmw.responses import ProviderResponse

__all__ = ["CHUNK_TOKENS", "DOCUMENTS_PER_UNIT", "PAIR_TOKENS", "RankedDocument", "RerankRequest", "RerankResponse"]

# Cohere's billing rule (above): documents per search unit, and tokens per chunk of a document.
DOCUMENTS_PER_UNIT = 100
CHUNK_TOKENS = 500
# The special tokens a cross-encoder wraps one (query, document) pair in ([CLS] q [SEP] d [SEP], a
# BOS and EOS): at most 4 in the tokenizers of record; 8 leaves room.
PAIR_TOKENS = 8


def _frozen(value: Mapping[str, Any] | None) -> FrozenMap:
    return value if isinstance(value, FrozenMap) else FrozenMap(value)


def _query(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"query must be a non-empty string, got {value!r:.40}")


def _documents(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ConfigurationError(f"documents must be a list of strings, got {type(value).__name__}")
    documents = tuple(value)
    if not documents:
        raise ConfigurationError("documents must hold at least one string")
    for i, document in enumerate(documents):
        if not isinstance(document, str) or not document:
            raise ConfigurationError(f"documents[{i}] must be a non-empty string, got {document!r:.40}")
    return documents


def _utf8(text: str) -> int:
    return len(text.encode("utf-8"))


@attrs.frozen
class RerankRequest:
    """A query, the documents to order by relevance to it, and how many of the best to return
    (``top_n``: all when None)."""

    query: str = attrs.field(validator=_query)
    documents: tuple[str, ...] = attrs.field(converter=_documents)
    top_n: int | None = None
    options: FrozenMap = attrs.field(factory=FrozenMap, converter=_frozen)

    def __attrs_post_init__(self) -> None:
        top_n = self.top_n
        if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int)
                                  or not 1 <= top_n <= len(self.documents)):
            raise ConfigurationError(f"top_n must be None or an integer from 1 to {len(self.documents)} "
                                     f"(the number of documents), got {top_n!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query, "documents": list(self.documents), "top_n": self.top_n,
                "options": plain_json(self.options)}

    def needs(self, *, streaming: bool) -> frozenset[str]:
        return frozenset({"rerank"})

    def input_bytes(self) -> int:
        """The most input tokens a token-priced reranker bills: the query once per document, each
        pair's separators, and the documents (the module's docstring says why)."""
        pairs = len(self.documents) * (_utf8(self.query) + PAIR_TOKENS)
        return pairs + sum(_utf8(d) for d in self.documents)

    def estimate_tokens(self) -> int:
        return (len(self.query) * len(self.documents) + sum(len(d) for d in self.documents)) // 4 + 1

    def most_output_tokens(self, options: Mapping[str, Any]) -> int | None:
        return 0

    def most_units(self, options: Mapping[str, Any]) -> Mapping[str, float]:
        """Cohere's search units at worst (the module's docstring says how)."""
        room = max(CHUNK_TOKENS - _utf8(self.query), 1)
        chunks = sum(max(1, math.ceil(_utf8(d) / room)) for d in self.documents)
        return {"search_unit": float(math.ceil(chunks / DOCUMENTS_PER_UNIT))}

    def deterministic(self, options: Mapping[str, Any]) -> bool:
        return True

    def texts(self) -> tuple[str, ...]:
        """The query, then each document."""
        return (self.query, *self.documents)

    def with_texts(self, texts: Sequence[str]) -> RerankRequest:
        """The same request with the query and the documents replaced, in ``texts``' order."""
        if len(texts) != 1 + len(self.documents):
            raise ConfigurationError(f"with_texts: expected {1 + len(self.documents)} texts (the query and each "
                                     f"document), got {len(texts)}")
        return attrs.evolve(self, query=texts[0], documents=tuple(texts[1:]))


def _index(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"index must be an integer of 0 or more, got {value!r}")


def _score(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"relevance_score must be a finite number, got {value!r:.40}")
    return float(value)


@attrs.frozen(kw_only=True)
class RankedDocument:
    """One document's place in the ranking: its index in the request's documents, and its score."""

    index: int = attrs.field(validator=_index)
    relevance_score: float = attrs.field(converter=_score)

    @classmethod
    def from_dict(cls, value: object, where: str = "result") -> RankedDocument:
        data = serde.mapping(value, where)
        return cls(index=serde.get(data, "index", int, where),
                   relevance_score=serde.finite(data.get("relevance_score"), f"{where}.relevance_score"))


def _ranked(value: Iterable[RankedDocument]) -> tuple[RankedDocument, ...]:
    """Best first; equal scores keep their documents' order. An index given twice is an error."""
    results = tuple(value)
    if not all(isinstance(r, RankedDocument) for r in results):
        raise ConfigurationError("results must be RankedDocuments")
    indexes = [r.index for r in results]
    if len(set(indexes)) != len(indexes):
        raise ConfigurationError(f"results: an index appears more than once in {sorted(indexes)[:10]}")
    return tuple(sorted(results, key=lambda r: (-r.relevance_score, r.index)))


@attrs.frozen(kw_only=True)
class RerankResponse(ProviderResponse):
    """The documents ranked, best first (``results``: each by its index in the request)."""

    TYPE = "rerank"

    results: tuple[RankedDocument, ...] = attrs.field(default=(), converter=_ranked)

    @property
    def indexes(self) -> tuple[int, ...]:
        """The documents' indexes, best first."""
        return tuple(r.index for r in self.results)

    @classmethod
    def _fields_from(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        rows = serde.get(data, "results", list, cls.TYPE)
        results = tuple(RankedDocument.from_dict(row, f"rerank.results[{i}]") for i, row in enumerate(rows))
        return {**super()._fields_from(data), "results": results}
