"""Reading Converse answers and ConverseStream events into provmw's responses and chunks.

Every field read is type-checked (``provmw.wire``); a wrong type raises, and the adapter turns
it into a ``MalformedResponseError`` naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from provmw import wire
from provmw.errors import MalformedResponseError
from provmw.messages import ToolCall
from provmw.responses import ChatChunk, Usage
from provmw.streams import ToolCallAssembler
from provmw_bedrock.converse import SCHEMA_TOOL

__all__ = ["FINISH_REASONS", "StreamReader", "answer", "finish_reason", "usage"]

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}
# The model wrote output Bedrock could not use: a bad answer, never a short one.
_MALFORMED_REASONS = frozenset({"malformed_model_output", "malformed_tool_use"})


def usage(value: object, model: str, where: str = "usage") -> Usage:
    """Bedrock's ``inputTokens`` leaves the cache out: the whole is it plus reads plus writes.

    ``cacheDetails`` splits the writes by TTL; writes it does not attribute are 5-minute ones.
    """
    body = wire.UsageBody.of(value, provider="bedrock", model=model, where=where)
    reads, writes = body.count("cacheReadInputTokens"), body.count("cacheWriteInputTokens")
    hour = sum(_hour_writes(body.body.get("cacheDetails"), model, where))
    if hour > writes:
        raise MalformedResponseError(f"{where}.cacheDetails ({hour} 1h tokens) exceeds cacheWriteInputTokens "
                                     f"({writes})", provider="bedrock", model=model)
    return body.usage(input_tokens=body.count("inputTokens") + reads + writes,
                      output_tokens=body.count("outputTokens"), cached_input_tokens=reads,
                      cache_write_5m_tokens=writes - hour, cache_write_1h_tokens=hour)


def _hour_writes(details: object, model: str, where: str) -> list[int]:
    found: list[int] = []
    for i, value in enumerate(wire.sequence(details if details is not None else [], f"{where}.cacheDetails")):
        detail = wire.UsageBody.of(value, provider="bedrock", model=model, where=f"{where}.cacheDetails[{i}]")
        ttl = wire.get(detail.body, "ttl", str, detail.where)
        if ttl == "1h":
            found.append(detail.count("inputTokens"))
    return found


def finish_reason(reason: str, model: str) -> str:
    """The normalised finish reason; malformed output raises."""
    if reason in _MALFORMED_REASONS:
        raise MalformedResponseError(f"the model's output was malformed (stopReason {reason})", provider="bedrock",
                                     model=model)
    return FINISH_REASONS.get(reason, reason)


def answer(data: Any, model: str) -> tuple[str, tuple[ToolCall, ...], str, Usage]:
    """Text, tool calls, finish reason and usage of a Converse answer."""
    body = wire.mapping(data, "response")
    message = wire.get(wire.get(body, "output", dict, "response"), "message", dict, "response.output")
    text, calls, schema = _blocks(wire.get(message, "content", list, "response.output.message"))
    reason = finish_reason(wire.get(body, "stopReason", str, "response"), model)
    if schema is not None:  # the forced tool's input is the answer
        text, reason = schema, "stop" if reason == "tool_calls" and not calls else reason
    return text, calls, reason, usage(body.get("usage"), model)


def _blocks(blocks: Sequence[Any]) -> tuple[str, tuple[ToolCall, ...], str | None]:
    """Text, tool calls and the schema tool's input (as JSON) of ``content``; other blocks are skipped."""
    text: list[str] = []
    calls: list[ToolCall] = []
    schema: str | None = None
    for i, value in enumerate(blocks):
        where = f"response.output.message.content[{i}]"
        block = wire.mapping(value, where)
        if "text" in block:
            text.append(wire.get(block, "text", str, where))
        elif "toolUse" in block:
            use = wire.get(block, "toolUse", dict, where)
            name = wire.get(use, "name", str, f"{where}.toolUse")
            arguments = json.dumps(wire.get(use, "input", (dict, list, str, int, float, bool), f"{where}.toolUse"))
            if name == SCHEMA_TOOL:
                schema = arguments
            else:
                calls.append(ToolCall(id=wire.get(use, "toolUseId", str, f"{where}.toolUse"), name=name,
                                      arguments=arguments))
    return "".join(text), tuple(calls), schema


class StreamReader:
    """One ConverseStream's events into chunks: text as it comes, tool calls whole at
    ``messageStop``, and a last chunk with the finish reason and usage once ``metadata`` came."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._tools = ToolCallAssembler()
        self._schema_blocks: set[int] = set()
        self._reason: str | None = None
        self._usage: Usage | None = None

    @property
    def done(self) -> bool:
        """Whether both the stop reason and the usage have come: the stream's documented end."""
        return self._reason is not None and self._usage is not None

    def read(self, event_type: str | None, data: Mapping[str, Any]) -> ChatChunk | None:
        """The chunk one event gives, if any; unknown events give none."""
        where = f"event {event_type}"
        if event_type == "contentBlockStart":
            self._start(data, where)
        elif event_type == "contentBlockDelta":
            return self._delta(data, where)
        elif event_type == "messageStop":
            self._reason = finish_reason(wire.get(data, "stopReason", str, where), self._model)
            calls = self._tools.calls()
            if self._schema_blocks and self._reason == "tool_calls" and not calls:
                self._reason = "stop"
            return self._last(ChatChunk(tool_calls=calls) if calls else None)
        elif event_type == "metadata":
            self._usage = usage(wire.get(data, "usage", dict, where), self._model, f"{where}.usage")
            return self._last(None)
        return None

    def _start(self, data: Mapping[str, Any], where: str) -> None:
        index = wire.get(data, "contentBlockIndex", int, where)
        start = wire.get(data, "start", dict, where, default=None) or {}
        use = wire.get(start, "toolUse", dict, f"{where}.start", default=None)
        if use is None:
            return
        name = wire.get(use, "name", str, f"{where}.start.toolUse")
        if name == SCHEMA_TOOL:
            self._schema_blocks.add(index)
        else:
            self._tools.add(index, id=wire.get(use, "toolUseId", str, f"{where}.start.toolUse"), name=name)

    def _delta(self, data: Mapping[str, Any], where: str) -> ChatChunk | None:
        index = wire.get(data, "contentBlockIndex", int, where)
        delta = wire.get(data, "delta", dict, where)
        if "text" in delta:
            return ChatChunk(text=wire.get(delta, "text", str, f"{where}.delta"))
        use = wire.get(delta, "toolUse", dict, f"{where}.delta", default=None)
        if use is None:
            return None  # reasoning and citation deltas
        piece = wire.get(use, "input", str, f"{where}.delta.toolUse")
        if index in self._schema_blocks:
            return ChatChunk(text=piece)
        self._tools.add(index, arguments=piece)
        return None

    def _last(self, chunk: ChatChunk | None) -> ChatChunk | None:
        if not self.done:
            return chunk
        final = ChatChunk(finish_reason=self._reason, usage=self._usage)
        return final if chunk is None else ChatChunk(tool_calls=chunk.tool_calls, finish_reason=self._reason,
                                                     usage=self._usage)
