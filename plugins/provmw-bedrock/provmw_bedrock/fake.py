"""``BedrockWire``: the Converse, ConverseStream and Rerank wire for ``provmw.testing.FakeProvider``.

    async with FakeProvider(wires=[BedrockWire()]) as fake:
        config = ProviderConfig(identifier="b", provider="bedrock", model="anthropic.claude-v2",
                                base_url=fake.url, api_key="bedrock-key")

Converse answers as the other fake wires do ("echo: <last user text>", one token a word; with
tools, one call of the first tool, or of the one ``toolChoice`` names, per non-empty line of
the last user message; the ``json_answer`` tool of a ``response_schema`` gets an object the
schema accepts). Rerank (route ``bedrock_rerank``) ranks as the fake's Cohere wire does
(``provmw.testing.wire_rank``) and, as Bedrock's, reports no usage. Streams are AWS
event-stream messages with both CRCs; an in-band error is an exception message. Differences
from AWS, all deliberate: an error answer names its type in the body's ``__type`` (a fake wire
cannot set headers; give ``Fault(headers={"x-amzn-errortype": ...})`` to test the header), a
stall with keepalives is silent (the framing has none), and signatures are not checked (the
plugin's tests verify them with a server of their own).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from provmw.testing import Tokenizer
from provmw.testing.wire_rank import cohere_rerank
from provmw_bedrock.adapter import EVENT_STREAM
from provmw_bedrock.converse import SCHEMA_TOOL
from provmw_bedrock.eventstream import encode_message

__all__ = ["BedrockWire", "converse_answer", "converse_events", "event_frame", "rerank_answer"]

# The exception AWS names for each status it documents for Converse.
_ERROR_TYPES = {400: "ValidationException", 403: "AccessDeniedException", 404: "ResourceNotFoundException",
                408: "ModelTimeoutException", 424: "ModelErrorException", 429: "ThrottlingException",
                500: "InternalServerException", 503: "ServiceUnavailableException"}
# Rerank's (Agent Runtime) exceptions where they differ from Converse's.
_RERANK_ERROR_TYPES = {**_ERROR_TYPES, 408: None, 424: "DependencyFailedException", 502: "BadGatewayException"}
_IMAGE_TOKENS = 85


def _text(content: Any) -> str:
    blocks = content if isinstance(content, list) else []
    return " ".join(b["text"] for b in blocks if isinstance(b, Mapping) and isinstance(b.get("text"), str))


def _images(messages: list[Any]) -> int:
    return sum(1 for m in messages for b in m.get("content", []) if isinstance(b, Mapping) and "image" in b)


def _is_tool_result(message: Mapping[str, Any]) -> bool:
    return any(isinstance(b, Mapping) and "toolResult" in b for b in message.get("content", []))


def _instance(schema: Any, text: str) -> Any:
    """A value ``schema`` accepts, for the forced schema tool: its enum, const, or a value of its type."""
    if not isinstance(schema, Mapping):
        return text
    if "const" in schema or schema.get("enum"):
        return schema.get("const", (schema.get("enum") or [None])[0])
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object" or "properties" in schema:
        return {name: _instance(sub, text) for name, sub in (schema.get("properties") or {}).items()}
    values = {"array": [], "integer": schema.get("minimum", 0), "number": schema.get("minimum", 0),
              "boolean": True, "null": None}
    return values.get(kind, text) if isinstance(kind, str) else text


def _tool_calls(body: Mapping[str, Any], messages: list[Any]) -> list[dict[str, Any]]:
    tools = (body.get("toolConfig") or {}).get("tools") or []
    if not tools or not messages or _is_tool_result(messages[-1]):
        return []
    forced = ((body["toolConfig"].get("toolChoice") or {}).get("tool") or {}).get("name")
    spec = next((t["toolSpec"] for t in tools if t["toolSpec"]["name"] == forced), tools[0]["toolSpec"])
    text = _text(messages[-1].get("content"))
    if spec["name"] == SCHEMA_TOOL:
        inputs = [_instance(spec["inputSchema"]["json"], f"echo: {text}")]
    else:
        inputs = [{"query": line.strip()} for line in text.splitlines() if line.strip()] or [{"query": text}]
    return [{"toolUse": {"toolUseId": f"tooluse_{i}", "name": spec["name"], "input": value}}
            for i, value in enumerate(inputs)]


def _cut(text: str, max_tokens: Any, count: Tokenizer) -> str:
    if not isinstance(max_tokens, int) or count(text) <= max_tokens:
        return text
    return " ".join(text.split()[:max_tokens])


def converse_answer(body: Mapping[str, Any], count: Tokenizer) -> dict[str, Any]:
    """A Converse answer to ``body``."""
    messages = list(body.get("messages", []))
    content: list[dict[str, Any]] = _tool_calls(body, messages)
    stop = "tool_use" if content else "end_turn"
    if not content:
        last_user = next((_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
        images = _images(messages)
        seen = f"I see {images} image{'s' if images != 1 else ''}. " if images else ""
        text = f"{seen}echo: {last_user}".strip()
        output = _cut(text, (body.get("inferenceConfig") or {}).get("maxTokens"), count)
        stop = "max_tokens" if output != text else stop
        content.append({"text": output})
    system = " ".join(b.get("text", "") for b in body.get("system", []))
    input_tokens = (count(system) if system else 0) + sum(count(_text(m.get("content"))) for m in messages)
    output_tokens = count(content[0]["text"]) if "text" in content[0] else 1
    input_tokens += _IMAGE_TOKENS * _images(messages)
    return {"output": {"message": {"role": "assistant", "content": content}}, "stopReason": stop,
            "usage": {"inputTokens": input_tokens, "outputTokens": output_tokens,
                      "totalTokens": input_tokens + output_tokens},
            "metrics": {"latencyMs": 1}}


def converse_events(answer: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The ConverseStream events of ``answer``, as Bedrock sends them: text blocks as deltas,
    tool uses as a start then pieces of their input, the stop reason, then the usage."""
    yield "messageStart", {"role": "assistant"}
    for index, block in enumerate(answer["output"]["message"]["content"]):
        if "text" in block:
            for word in block["text"].split(" "):
                yield "contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": word + " "}}
        else:
            use = block["toolUse"]
            yield "contentBlockStart", {"contentBlockIndex": index,
                                        "start": {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}}
            arguments = json.dumps(use["input"])
            for start in range(0, len(arguments), 7):
                yield "contentBlockDelta", {"contentBlockIndex": index,
                                            "delta": {"toolUse": {"input": arguments[start:start + 7]}}}
        yield "contentBlockStop", {"contentBlockIndex": index}
    yield "messageStop", {"stopReason": answer["stopReason"]}
    yield "metadata", {"usage": answer.get("usage"), "metrics": answer.get("metrics", {"latencyMs": 1})}


def _rerank_texts(body: Mapping[str, Any]) -> tuple[str, list[str]]:
    queries = body.get("queries") or [{}]
    query = str((queries[0].get("textQuery") or {}).get("text", ""))
    sources = [s.get("inlineDocumentSource") or {} for s in body.get("sources", [])]
    return query, [str((s.get("textDocument") or {}).get("text", "")) for s in sources]


def _rerank_model(body: Mapping[str, Any]) -> str:
    ranking = (body.get("rerankingConfiguration") or {}).get("bedrockRerankingConfiguration") or {}
    arn = str((ranking.get("modelConfiguration") or {}).get("modelArn", ""))
    return arn.rpartition("foundation-model/")[2] or arn


def rerank_answer(body: Mapping[str, Any], count: Tokenizer) -> dict[str, Any]:
    """A Rerank answer to ``body``: ranked as the fake's Cohere wire ranks, in Bedrock's names, no usage."""
    query, documents = _rerank_texts(body)
    ranking = (body.get("rerankingConfiguration") or {}).get("bedrockRerankingConfiguration") or {}
    ranked = cohere_rerank({"query": query, "documents": documents, "top_n": ranking.get("numberOfResults")}, count)
    return {"results": [{"index": r["index"], "relevanceScore": r["relevance_score"]} for r in ranked["results"]]}


def event_frame(event_type: str, data: Mapping[str, Any]) -> bytes:
    """One event message of a ConverseStream."""
    return encode_message({":event-type": event_type, ":content-type": "application/json",
                           ":message-type": "event"}, json.dumps(data).encode())


class BedrockWire:
    """Bedrock Runtime's Converse (``/model/{id}/converse``) and ConverseStream routes, and Agent
    Runtime's Rerank (``bedrock_rerank``: ``/rerank``, the model named by the ARN in its body)."""

    routes: Mapping[str, str] = {"converse": "/model/{model}/converse",
                                 "converse_stream": "/model/{model}/converse-stream",
                                 "bedrock_rerank": "/rerank"}
    stream_content_type = EVENT_STREAM
    stream_preamble = b""
    keepalive = b""

    def model(self, route: str, path_model: str | None, body: Mapping[str, Any]) -> str:
        return _rerank_model(body) if route == "bedrock_rerank" else path_model or ""

    def streams(self, route: str, body: Mapping[str, Any]) -> bool:
        return route == "converse_stream"

    def answer(self, route: str, body: Mapping[str, Any], count: Tokenizer) -> dict[str, Any]:
        return rerank_answer(body, count) if route == "bedrock_rerank" else converse_answer(body, count)

    def with_usage(self, payload: dict[str, Any], usage: Mapping[str, Any]) -> dict[str, Any]:
        return {**payload, "usage": dict(usage)}

    def frames(self, route: str, body: Mapping[str, Any], payload: Mapping[str, Any]) -> list[bytes]:
        return [event_frame(kind, data) for kind, data in converse_events(payload)]

    def error_body(self, route: str, status: int, code: str | None, message: str) -> dict[str, Any]:
        kind = code or (_RERANK_ERROR_TYPES if route == "bedrock_rerank" else _ERROR_TYPES).get(status)
        return {"message": message, **({"__type": kind} if kind else {})}

    def error_frame(self, route: str, code: str | None, message: str) -> bytes:
        kind = code or "serviceUnavailableException"
        return encode_message({":exception-type": kind[:1].lower() + kind[1:], ":content-type": "application/json",
                               ":message-type": "exception"}, json.dumps({"message": message}).encode())

    def malformed_frame(self, route: str) -> bytes:
        frame = event_frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "x"}})
        return frame[:-1] + bytes([frame[-1] ^ 0xFF])  # its message checksum no longer matches
