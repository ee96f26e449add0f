"""The body of a Converse or ConverseStream request, from a provmw ``ChatRequest``.

Bedrock's conversation alternates user and assistant turns: system messages go to
``system``, tool results travel as user turns, and neighbouring turns of one role merge.
Images go as bytes (base64 in JSON) or as ``s3://`` locations: Bedrock fetches no web URL.
``response_schema`` becomes a forced tool whose input is the answer (``SCHEMA_TOOL``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from provmw.config import ProviderConfig
from provmw.errors import InvalidRequestError
from provmw.http import plain_json
from provmw.messages import ImagePart, Message, TextPart, ToolSpec
from provmw.requests import ChatRequest, merged_options
from provmw.wire import with_extra_body

__all__ = ["IMAGE_FORMATS", "SCHEMA_TOOL", "request_body"]

log = logging.getLogger(__name__)

# The tool a response_schema is asked through; its input is returned as the answer's text.
SCHEMA_TOOL = "json_answer"
IMAGE_FORMATS = {"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg", "image/gif": "gif",
                 "image/webp": "webp"}
_SUFFIX_FORMATS = {"png": "png", "jpg": "jpeg", "jpeg": "jpeg", "gif": "gif", "webp": "webp"}
_INFERENCE = {"max_tokens": "maxTokens", "max_completion_tokens": "maxTokens", "temperature": "temperature",
              "top_p": "topP", "stop": "stopSequences"}
# Options Bedrock has no field for but Anthropic's models read from additionalModelRequestFields.
_MODEL_FIELDS = ("top_k", "thinking")
_CHOICE_KINDS = {"auto": "auto", "required": "any", "any": "any"}
_CONSUMED = {*_INFERENCE, *_MODEL_FIELDS, "tool_choice", "extra_body"}


def request_body(config: ProviderConfig, request: ChatRequest) -> dict[str, Any]:
    """The JSON body of a Converse call, as the Bedrock Runtime API documents it."""
    options = merged_options(config, request.options)
    body: dict[str, Any] = {"messages": _messages(request.messages, config.model)}
    if system := [{"text": m.text} for m in request.messages if m.role == "system" and m.text]:
        body["system"] = system
    if inference := _inference(options):
        body["inferenceConfig"] = inference
    if tools := _tool_config(request, options):
        body["toolConfig"] = tools
    if fields := {name: plain_json(options[name]) for name in _MODEL_FIELDS if name in options}:
        body["additionalModelRequestFields"] = fields
    if ignored := sorted(set(options) - _CONSUMED):
        log.debug("bedrock ignores options %s", ignored)
    return with_extra_body(body, options)


def _inference(options: Mapping[str, Any]) -> dict[str, Any]:
    inference: dict[str, Any] = {}
    for name, wire in _INFERENCE.items():
        if name in options and wire not in inference:
            value = options[name]
            inference[wire] = [value] if name == "stop" and isinstance(value, str) else plain_json(value)
    return inference


def _messages(messages: tuple[Message, ...], model: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message, model)
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _blocks(message: Message, model: str) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [{"toolResult": {"toolUseId": message.tool_call_id, "content": [{"text": message.text}]}}]
    # Bedrock refuses a blank text block: an assistant turn of tool calls alone has none.
    blocks = [_part(p, model) for p in message.content if not (isinstance(p, TextPart) and not p.text)]
    blocks += [{"toolUse": {"toolUseId": c.id, "name": c.name, "input": c.parsed_arguments()}}
               for c in message.tool_calls]
    return blocks


def _part(part: TextPart | ImagePart, model: str) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"text": part.text}
    if part.url is None:
        return {"image": {"format": _format(IMAGE_FORMATS.get(part.media_type), part.media_type, model),
                          "source": {"bytes": part.base64}}}
    if urlsplit(part.url).scheme != "s3":
        raise InvalidRequestError("bedrock takes an image as bytes or as an s3:// location, not a web URL: "
                                  "fetch it and pass ImagePart(data=...)", provider="bedrock", model=model)
    suffix = part.url.rsplit(".", 1)[-1].lower()
    return {"image": {"format": _format(_SUFFIX_FORMATS.get(suffix), part.url, model),
                      "source": {"s3Location": {"uri": part.url}}}}


def _format(found: str | None, what: str, model: str) -> str:
    if found is None:
        raise InvalidRequestError(f"bedrock takes png, jpeg, gif or webp images; {what[:80]!r} is none of them",
                                  provider="bedrock", model=model)
    return found


def _tool(tool: ToolSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": tool.name, "inputSchema": {"json": plain_json(tool.parameters)}}
    if tool.description:  # Bedrock refuses an empty description
        spec["description"] = tool.description
    return {"toolSpec": spec}


def _tool_config(request: ChatRequest, options: Mapping[str, Any]) -> dict[str, Any] | None:
    tools = [_tool(t) for t in request.tools]
    if request.response_schema is not None:
        tools.append({"toolSpec": {"name": SCHEMA_TOOL, "description": "Give the answer as this object.",
                                   "inputSchema": {"json": plain_json(request.response_schema)}}})
        return {"tools": tools, "toolChoice": {"tool": {"name": SCHEMA_TOOL}}}
    if not tools:
        return None
    config: dict[str, Any] = {"tools": tools}
    if (choice := _tool_choice(options.get("tool_choice"))) is not None:
        config["toolChoice"] = choice
    return config


def _tool_choice(value: Any) -> dict[str, Any] | None:
    """OpenAI's ``tool_choice`` in Bedrock's terms; ``none`` has no equivalent and leaves the model free."""
    if isinstance(value, Mapping):
        function = value.get("function")
        name = value.get("name") or (function.get("name") if isinstance(function, Mapping) else None)
        return {"tool": {"name": name}} if isinstance(name, str) else None
    kind = _CHOICE_KINDS.get(value) if isinstance(value, str) else None
    return {kind: {}} if kind is not None else None
