"""The Responses API served by a chat adapter: a ``ResponsesRequest`` as the ``ChatRequest`` that asks
the same, and the chat answer back as a ``ResponsesResponse`` (ADR 0052). The terminal uses it for an
adapter without the Responses wire (``Capabilities.responses`` False).

``to_chat`` (request to ``ChatRequest``):
- ``instructions`` become the first message, a system message;
- a message item becomes a message of its role (``developer`` is ``system``), parts as they are;
- a function call becomes a tool call of the assistant message before it (a new assistant
  message when the one before is not the assistant's); a function call output becomes a tool
  message answering its ``call_id``;
- reasoning items are dropped: a chat wire takes no reasoning back;
- ``tools`` and ``response_schema`` are carried as they are; options are carried but for
  ``max_output_tokens``, which becomes ``max_tokens``, ``reasoning.effort``, which becomes
  ``reasoning_effort``, and the Responses-only ones (``include``, ``truncation``, ``text``,
  ``background``, ``reasoning``'s other fields), which are dropped;
- what only the native wire does (``previous_response_id``, ``store``, encrypted reasoning,
  built-in tools) raises ``UnsupportedOperationError``: its needs keep it from chat adapters.

``from_completion`` (chat answer to ``ResponsesResponse``): the text becomes one assistant
message item and each tool call a function call item (``call_id`` is the tool call's id), in
that order; ``finish_reason`` is kept; ``status`` is ``incomplete`` when the answer was cut
(``length``, ``content_filter``), else ``completed``; ``response_id`` is the chat answer's own
id; ``parsed`` is the completion's (the ``structured_output`` layer judges the answer above).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from provmw.context import FrozenMap
from provmw.errors import UnsupportedOperationError
from provmw.messages import Message, ToolCall
from provmw.operations.responses_api import (
    FunctionCall,
    FunctionCallOutput,
    MessageItem,
    OutputItem,
    ResponsesRequest,
    ResponsesResponse,
    output_fields,
)
from provmw.requests import ChatRequest
from provmw.responses import CompletionResponse

__all__ = ["from_completion", "to_chat"]

# Options only the Responses wire reads; a translated call leaves them out (see the docstring).
_RESPONSES_ONLY = frozenset({"include", "truncation", "text", "background", "reasoning", "max_output_tokens",
                            "max_tool_calls"})


def to_chat(request: ResponsesRequest) -> ChatRequest:
    """The chat request that asks what ``request`` asks (the rules: the module docstring)."""
    if request.native_only or request.builtin_tools:
        raise UnsupportedOperationError("chat", "builtin_tools" if request.builtin_tools else "responses")
    messages = [Message.system(request.instructions)] if request.instructions else []
    for item in request.input:
        if isinstance(item, FunctionCall):
            call = ToolCall(item.call_id, item.name, item.arguments)
            if messages and messages[-1].role == "assistant":
                messages[-1] = attrs.evolve(messages[-1], tool_calls=(*messages[-1].tool_calls, call))
            else:
                messages.append(Message.assistant(tool_calls=(call,)))
        elif isinstance(item, FunctionCallOutput):
            messages.append(Message.tool(item.call_id, item.output))
        elif isinstance(item, MessageItem):
            messages.append(Message("system" if item.role == "developer" else item.role, item.content))
    return ChatRequest(tuple(messages), request.tools, _chat_options(request.options), request.response_schema)


def _chat_options(options: FrozenMap) -> dict[str, Any]:
    out = {k: v for k, v in options.items() if k not in _RESPONSES_ONLY}
    if "max_output_tokens" in options:
        out["max_tokens"] = options["max_output_tokens"]
        out.pop("max_completion_tokens", None)
    reasoning = options.get("reasoning")
    if isinstance(reasoning, Mapping) and reasoning.get("effort") is not None:
        out["reasoning_effort"] = reasoning["effort"]
    return out


def from_completion(response: CompletionResponse, request: ResponsesRequest) -> ResponsesResponse:
    """The Responses answer a chat answer to ``to_chat(request)`` stands for (rules: the module docstring)."""
    output: list[OutputItem] = [MessageItem("assistant", response.text)] if response.text else []
    output += [FunctionCall(c.id, c.name, c.arguments) for c in response.tool_calls]
    cut = response.finish_reason in ("length", "content_filter")
    return ResponsesResponse(
        provider=response.provider, model=response.model, response_id=response.response_id, usage=response.usage,
        served_by=response.served_by, cached=response.cached, attempts=response.attempts,
        rate_limit=response.rate_limit, finish_reason=response.finish_reason, parsed=response.parsed,
        status="incomplete" if cut else "completed", **output_fields(tuple(output)))
