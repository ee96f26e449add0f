"""``GeminiWire``: the Gemini API served by ``provmw.testing.FakeProvider`` on loopback::

    async with FakeProvider(wires=[GeminiWire()]) as fake:
        config = ProviderConfig(identifier="g", provider="gemini", model="gemini-2.5-flash",
                                base_url=fake.url + "/v1beta")

It answers as the other wires do ("echo: <last user text>", one token a word; with tools,
one call of the first function per non-empty line of the last user message; JSON that fits
``responseJsonSchema`` when one is asked), and every ``Fault`` works on its routes. What only
Gemini does is asked for in the text or the fault:

- a last user message holding ``BLOCK_PROMPT`` gets ``promptFeedback.blockReason: SAFETY``,
  one holding ``BLOCK_ANSWER`` a candidate that ends in ``finishReason: SAFETY``;
- an error whose message says "Please retry in 12s." carries a ``RetryInfo`` of 12s, as
  Gemini's own 429s do; ``Fault(code=...)`` with ``context_length_exceeded``,
  ``insufficient_quota`` or ``API_KEY_INVALID`` gets the body Gemini sends for it, and any
  other code is the error's ``status``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from provmw.testing import Tokenizer, embedding_vector, sse
from provmw_gemini.schema_instance import instance

__all__ = ["BLOCK_ANSWER", "BLOCK_PROMPT", "GeminiWire", "gemini_error", "generate", "stream"]

BLOCK_PROMPT = "[block-prompt]"
BLOCK_ANSWER = "[block-answer]"
_RPC = "type.googleapis.com/google.rpc."
_STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                 408: "DEADLINE_EXCEEDED", 409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
                 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
_RETRY_IN = re.compile(r"retry in (\d+(?:\.\d+)?)s", re.IGNORECASE)
_HARASSMENT = [{"category": "HARM_CATEGORY_HARASSMENT", "probability": "HIGH", "blocked": True}]


def _texts(parts: Any) -> str:
    return " ".join(p["text"] for p in parts or () if isinstance(p, Mapping) and isinstance(p.get("text"), str))


def _images(contents: list[Any]) -> int:
    return sum(1 for c in contents for p in c.get("parts") or () if "inlineData" in p or "fileData" in p)


def _last_user(contents: list[Any]) -> Mapping[str, Any]:
    return next((c for c in reversed(contents) if c.get("role") == "user"), {})


def _prompt_tokens(body: Mapping[str, Any], contents: list[Any], count: Tokenizer) -> int:
    system = _texts((body.get("systemInstruction") or {}).get("parts"))
    text = sum(count(_texts(c.get("parts"))) for c in contents)
    return (count(system) if system else 0) + text + 85 * _images(contents)


def _calls(body: Mapping[str, Any], contents: list[Any]) -> list[dict[str, Any]]:
    """One call of the first function per line of the last user text, unless tools are off or
    the last turn is the functions' results."""
    declarations = [d for tool in body.get("tools") or () for d in tool.get("functionDeclarations") or ()]
    mode = ((body.get("toolConfig") or {}).get("functionCallingConfig") or {}).get("mode")
    last = contents[-1].get("parts") if contents else []
    if not declarations or mode == "NONE" or any("functionResponse" in p for p in last or ()):
        return []
    text = _texts(last)
    queries = [line.strip() for line in text.splitlines() if line.strip()] or [text]
    return [{"functionCall": {"name": declarations[0]["name"], "args": {"query": q}}} for q in queries]


def _text(body: Mapping[str, Any], contents: list[Any]) -> str:
    generation = body.get("generationConfig") or {}
    last = _texts(_last_user(contents).get("parts"))
    if generation.get("responseMimeType") == "application/json":
        return json.dumps(instance(generation.get("responseJsonSchema") or {"type": "object"}, f"echo: {last}"))
    images = _images(contents)
    seen = f"I see {images} image{'s' if images != 1 else ''}. " if images else ""
    return f"{seen}echo: {last}".strip()


def _cut(text: str, bound: Any, count: Tokenizer) -> str:
    if not isinstance(bound, int) or count(text) <= bound:
        return text
    return " ".join(text.split()[:bound])


def generate(body: Mapping[str, Any], count: Tokenizer) -> dict[str, Any]:
    """A ``GenerateContentResponse`` to ``body``."""
    contents = list(body.get("contents") or [])
    prompt = _prompt_tokens(body, contents, count)
    answer_id = "fake-" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    last = _texts(_last_user(contents).get("parts"))
    if BLOCK_PROMPT in last:
        return {"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": _HARASSMENT},
                "usageMetadata": {"promptTokenCount": prompt, "totalTokenCount": prompt}, "responseId": answer_id}
    parts, finish, output = _calls(body, contents), "STOP", 1
    if not parts:
        text = _text(body, contents)
        cut = _cut(text, (body.get("generationConfig") or {}).get("maxOutputTokens"), count)
        parts, finish, output = [{"text": cut}], "STOP" if cut == text else "MAX_TOKENS", count(cut)
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}
    if BLOCK_ANSWER in last:
        candidate.update(finishReason="SAFETY", safetyRatings=_HARASSMENT)
    return {"candidates": [candidate], "responseId": answer_id,
            "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": output,
                              "totalTokenCount": prompt + output}}


def stream(full: Mapping[str, Any]) -> list[str]:
    """The events that stream ``full``: a word (or a call) an event, then one that carries the
    finish reason and the usage; a blocked prompt is one event."""
    if not full.get("candidates"):
        return [json.dumps(full)]
    candidate = full["candidates"][0]
    head = {"responseId": full["responseId"],
            "usageMetadata": {"promptTokenCount": full["usageMetadata"].get("promptTokenCount", 0)}}
    pieces: list[dict[str, Any]] = []
    for part in candidate["content"]["parts"]:
        words = part["text"].split(" ") if "text" in part else []
        pieces += [{"text": w if i == len(words) - 1 else w + " "} for i, w in enumerate(words)] or [part]
    last = {**candidate, "content": {"role": "model", "parts": [{"text": ""}]}}
    return [json.dumps({**head, "candidates": [{"content": {"role": "model", "parts": [p]}, "index": 0}]})
            for p in pieces] + [json.dumps({**full, "candidates": [last]})]


def gemini_error(status: int, code: str | None, message: str) -> dict[str, Any]:
    """The body Gemini sends with ``status``, refined by a provmw or Gemini ``code``."""
    name = _STATUS_NAMES.get(status) or ("INVALID_ARGUMENT" if status < 500 else "UNAVAILABLE")
    details: list[dict[str, Any]] = []
    if code == "context_length_exceeded":
        name, message = "INVALID_ARGUMENT", f"The input token count (1048577) exceeds the maximum number of " \
                                            f"tokens allowed (1048576). {message}"
    elif code == "insufficient_quota":
        name = "RESOURCE_EXHAUSTED"
        details.append({"@type": _RPC + "QuotaFailure", "violations": [
            {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
             "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]})
    elif code == "API_KEY_INVALID":
        name = "INVALID_ARGUMENT"
        details.append({"@type": _RPC + "ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com"})
    elif code:
        name = code
    if match := _RETRY_IN.search(message):
        details.append({"@type": _RPC + "RetryInfo", "retryDelay": f"{match.group(1)}s"})
    error = {"code": status, "message": message, "status": name}
    return {"error": {**error, "details": details} if details else error}


def _embedding(text: str, dimensions: Any) -> dict[str, Any]:
    return {"values": embedding_vector(text, dimensions if isinstance(dimensions, int) else 8)}


class GeminiWire:
    """The Gemini API under ``/v1beta/models/{model}:<method>``."""

    routes: Mapping[str, str] = {
        "gemini_generate": "/v1beta/models/{model}:generateContent",
        "gemini_stream": "/v1beta/models/{model}:streamGenerateContent",
        "gemini_embed": "/v1beta/models/{model}:embedContent",
        "gemini_batch_embed": "/v1beta/models/{model}:batchEmbedContents",
    }
    stream_content_type = "text/event-stream"
    stream_preamble = b""
    keepalive = b": keepalive\n\n"

    def model(self, route: str, path_model: str | None, body: Mapping[str, Any]) -> str:
        return path_model or ""

    def streams(self, route: str, body: Mapping[str, Any]) -> bool:
        return route == "gemini_stream"

    def answer(self, route: str, body: Mapping[str, Any], count: Tokenizer) -> dict[str, Any]:
        if route == "gemini_embed":
            return {"embedding": _embedding(_texts(body["content"]["parts"]), body.get("outputDimensionality"))}
        if route == "gemini_batch_embed":
            return {"embeddings": [_embedding(_texts(r["content"]["parts"]), r.get("outputDimensionality"))
                                   for r in body["requests"]]}
        return generate(body, count)

    def with_usage(self, payload: dict[str, Any], usage: Mapping[str, Any]) -> dict[str, Any]:
        return {**payload, "usageMetadata": dict(usage)}

    def frames(self, route: str, body: Mapping[str, Any], payload: Mapping[str, Any]) -> list[bytes]:
        return [sse(data) for data in stream(payload)]

    def error_body(self, route: str, status: int, code: str | None, message: str) -> dict[str, Any]:
        return gemini_error(status, code, message)

    def error_frame(self, route: str, code: str | None, message: str) -> bytes:
        return sse(json.dumps(gemini_error(500, code, message)))

    def malformed_frame(self, route: str) -> bytes:
        return sse('{"candidates": [{"content": ')
