"""The fake provider's rerank and moderation wires: Cohere's ``/v2/rerank``, OpenAI's ``/v1/moderations``.

Answers are deterministic. A document's relevance is the share of the query's words it holds,
and the search units follow Cohere's billing rule with the fake's tokenizer (a search unit per
100 documents, a document over 500 tokens with the query counting as one per chunk). A text is
flagged when it holds a word of :data:`FLAGGED_WORDS`, in that word's category.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from provmw.testing.wires import Tokenizer, openai_error, sse

__all__ = ["CATEGORIES", "FLAGGED_WORDS", "RankWire", "cohere_error", "cohere_rerank", "openai_moderation"]

# The categories omni-moderation-latest reports, in its order.
CATEGORIES = ("harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent",
              "self-harm", "self-harm/instructions", "self-harm/intent", "sexual", "sexual/minors", "violence",
              "violence/graphic")
# A word found in a text flags it in these categories (whole words, any case).
FLAGGED_WORDS: Mapping[str, tuple[str, ...]] = {
    "kill": ("violence", "harassment/threatening"),
    "murder": ("violence",),
    "hate": ("hate",),
    "gore": ("violence/graphic",),
}
_WORD = re.compile(r"\w+")
_FLAGGED_SCORE, _CLEAR_SCORE = 0.97, 0.0001


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _relevance(query: set[str], document: str) -> float:
    return round(len(query & set(_words(document))) / max(len(query), 1), 6)


def _search_units(query: str, documents: list[str], count: Tokenizer) -> int:
    room = max(500 - count(query), 1)
    chunks = sum(max(1, math.ceil(count(d) / room)) for d in documents)
    return math.ceil(chunks / 100)


def cohere_rerank(body: Mapping[str, Any], count: Tokenizer) -> dict[str, Any]:
    """Cohere's v2 answer: the documents best first (equal scores in their order), ``top_n`` of them."""
    query, documents = str(body.get("query", "")), [str(d) for d in body.get("documents", [])]
    words = set(_words(query))
    ranked = sorted(range(len(documents)), key=lambda i: (-_relevance(words, documents[i]), i))
    top_n = body.get("top_n")
    kept = ranked[:top_n] if isinstance(top_n, int) else ranked
    return {"id": "rerank-fake", "results": [{"index": i, "relevance_score": _relevance(words, documents[i])}
                                             for i in kept],
            "meta": {"api_version": {"version": "2"},
                     "billed_units": {"search_units": _search_units(query, documents, count)}}}


def _verdict(text: str) -> dict[str, Any]:
    found = {category for word in _words(text) for category in FLAGGED_WORDS.get(word, ())}
    return {"flagged": bool(found), "categories": {c: c in found for c in CATEGORIES},
            "category_scores": {c: _FLAGGED_SCORE if c in found else _CLEAR_SCORE for c in CATEGORIES},
            "category_applied_input_types": {c: ["text"] for c in CATEGORIES}}


def openai_moderation(body: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI's answer: one result per input, in order."""
    inputs = body.get("input", [])
    texts = [inputs] if isinstance(inputs, str) else [str(t) for t in inputs]
    return {"id": "modr-fake", "model": body.get("model") or "omni-moderation-latest",
            "results": [_verdict(text) for text in texts]}


def cohere_error(status: int, code: str | None, message: str) -> dict[str, Any]:
    """Cohere's error body: a message (and an id), no code."""
    return {"id": "error-fake", "message": message}


class RankWire:
    """Rerank (``rerank``: ``/v2/rerank``, Cohere's) and moderation (``moderations``: ``/v1/moderations``,
    OpenAI's); neither streams."""

    routes: Mapping[str, str] = {"rerank": "/v2/rerank", "moderations": "/v1/moderations"}
    stream_content_type = "text/event-stream"
    stream_preamble = b""
    keepalive = b": keepalive\n\n"

    def model(self, route: str, path_model: str | None, body: Mapping[str, Any]) -> str:
        return str(body.get("model", ""))

    def streams(self, route: str, body: Mapping[str, Any]) -> bool:
        return False

    def answer(self, route: str, body: Mapping[str, Any], count: Tokenizer) -> dict[str, Any]:
        return cohere_rerank(body, count) if route == "rerank" else openai_moderation(body)

    def with_usage(self, payload: dict[str, Any], usage: Mapping[str, Any]) -> dict[str, Any]:
        """A fault's usage: Cohere's billed units on a rerank answer, else a ``usage`` object."""
        if "meta" in payload:
            return {**payload, "meta": {**payload["meta"], "billed_units": dict(usage)}}
        return {**payload, "usage": dict(usage)}

    def frames(self, route: str, body: Mapping[str, Any], payload: Mapping[str, Any]) -> list[bytes]:
        return [sse(json.dumps(payload))]

    def error_body(self, route: str, status: int, code: str | None, message: str) -> dict[str, Any]:
        return cohere_error(status, code, message) if route == "rerank" else openai_error(status, code, message)

    def error_frame(self, route: str, code: str | None, message: str) -> bytes:
        return sse(json.dumps(self.error_body(route, 500, code, message)))

    def malformed_frame(self, route: str) -> bytes:
        return sse('{"results": [')
